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

import "sync"

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
