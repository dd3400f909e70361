// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// replayableBody lets a request body be handed to a second peer when the
// first could not be connected to: it records whether a byte was read and
// ignores the transport's Close (the server closes the real body).
type replayableBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *replayableBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.read.Store(true)
	}
	return n, err
}

func (b *replayableBody) Close() error { return nil }
func (b *replayableBody) used() bool   { return b.read.Load() }

// trackingWriter records the status, whether anything was written and the
// proxy's error, if any.
type trackingWriter struct {
	http.ResponseWriter
	// code is the status the client got: made 200 by Serve, as net/http
	// sends a body written without WriteHeader.
	code  int
	wrote bool
	err   error
}

func (t *trackingWriter) WriteHeader(code int) {
	t.code, t.wrote = code, true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap makes trackingWriter a responsewriter.UserProvidedDecorator.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// copyBufferSize is httputil's default copy buffer size.
const copyBufferSize = 32 << 10

// copyBuffers pools the reverse proxies' copy buffers: without it, every
// proxied answer allocated its own 32 KiB.
var copyBuffers bufferPool

type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[copyBufferSize]byte); ok {
		return buf[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (b *bufferPool) Put(buf []byte) {
	if len(buf) == copyBufferSize {
		b.pool.Put((*[copyBufferSize]byte)(buf))
	}
}
