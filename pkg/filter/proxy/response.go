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
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// endCleanly ends a proxied long-running answer's stream (a watch) with
// EOF, not an error, when this server stops accepting requests or when the
// peer is stopped (the view marked it not ready), so the client just
// watches again. The shutdown signal is the one kube-apiserver ends its own
// watches by: the chain's WithWatchTerminationDuringShutdown
// (--shutdown-watch-termination-grace-period > 0) puts it in a watch's
// context. Without it, a watch proxied through a stopping server held its
// HTTP server open until the shutdown timeout, and the graceful stop took
// a minute.
func endCleanly(resp *http.Response) {
	if resp.Request == nil || resp.Body == nil {
		return
	}
	ctx := resp.Request.Context()
	b := &streamBody{ReadCloser: resp.Body, attempt: ctx, done: make(chan struct{})}
	if sig := apirequest.ServerShutdownSignalFrom(ctx); sig != nil {
		go func() {
			select {
			case <-sig.ShuttingDown():
				b.shutdown.Store(true)
				_ = b.ReadCloser.Close() // unblocks a pending Read
			case <-b.done:
			}
		}()
	}
	resp.Body = b
}

type streamBody struct {
	io.ReadCloser
	// attempt is the attempt's context: stopping the peer cancels it,
	// which fails the pending Read.
	attempt   context.Context
	done      chan struct{}
	closeOnce sync.Once
	shutdown  atomic.Bool
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && (b.shutdown.Load() || peerStopped(b.attempt)) {
		return n, io.EOF
	}
	return n, err
}

func (b *streamBody) Close() error {
	b.closeOnce.Do(func() { close(b.done) })
	return b.ReadCloser.Close()
}

// MaxReadAheadBytes is how much of a short read's answer is read from the
// peer before anything goes to the client. Most answers (an object, a small
// list) fit; a larger one streams on after it. At most this much per
// proxied GET in flight, pooled.
const MaxReadAheadBytes = 64 << 10

// readAheadBuffers pools the read-ahead buffers (no New: readAhead makes
// one when the pool has none, without a callback).
var readAheadBuffers sync.Pool

// readAhead reads the start of a safe read's answer before its headers go
// to the client. A peer that dies within it (a SIGKILL in the middle of a
// list) then fails the attempt before anything was written, and serve
// repeats the read on the next candidate instead of cutting the client's
// response. Only GET and HEAD on the short-running path (answerReadAhead):
// a write is never repeated, and a watch must not wait for bytes.
func readAhead(resp *http.Response) error {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	bp, _ := readAheadBuffers.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, MaxReadAheadBytes)
		bp = &b
	}
	n, err := io.ReadFull(resp.Body, *bp)
	switch err {
	case nil: // more to come: the rest streams after the start
		resp.Body = &readAheadBody{Reader: io.MultiReader(bytes.NewReader((*bp)[:n]), resp.Body), rest: resp.Body, buf: bp}
		return nil
	case io.EOF, io.ErrUnexpectedEOF: // the whole answer
		_ = resp.Body.Close()
		resp.Body = &readAheadBody{Reader: bytes.NewReader((*bp)[:n]), rest: http.NoBody, buf: bp}
		return nil
	default:
		_ = resp.Body.Close()
		readAheadBuffers.Put(bp)
		return fmt.Errorf("reading the peer's answer: %w", err)
	}
}

// readAheadBody serves what readAhead read, then the rest; Close returns
// the buffer (the reverse proxy closes the body once it is copied).
type readAheadBody struct {
	io.Reader
	rest   io.Closer
	buf    *[]byte
	closed atomic.Bool
}

func (b *readAheadBody) Close() error {
	err := b.rest.Close()
	if b.closed.CompareAndSwap(false, true) { // the buffer goes back once
		readAheadBuffers.Put(b.buf)
	}
	return err
}

// modifyResponse is a reverse proxy's ModifyResponse, all that is done to a
// peer's answer in one place: the peer's copies of headers this server has
// set already are dropped, a redirect is refused (rejectRedirect), and the
// answer is then held back until its start is read (readAhead) or, for a
// long-running request, streamed with a clean end (endCleanly).
func modifyResponse(answer answerHandling) func(*http.Response) error {
	return func(resp *http.Response) error {
		// The peer's Audit-ID is this request's (forwarded); the priority
		// and fairness headers name the peer's flow schema, not the one
		// that admitted the client here.
		resp.Header.Del(auditinternal.HeaderAuditID)
		resp.Header.Del(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)
		resp.Header.Del(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)
		if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.Header.Get("Location") != "" {
			rejectRedirect(resp)
		}
		switch answer {
		case answerStream:
			endCleanly(resp)
		case answerReadAhead:
			return readAhead(resp)
		}
		return nil
	}
}

// rejectRedirect replaces a peer's redirect with a 502, as
// UpgradeAwareHandler.RejectForwardingRedirects does: a redirect would send
// the client, or its credentials, elsewhere. The one exception keeps the
// client on this server: an OpenAPI v3 document's redirect from a stale
// hash to the current one, a path under /openapi/v3/ with no host.
func rejectRedirect(resp *http.Response) {
	if sameServerOpenAPIRedirect(resp) {
		return
	}
	_ = resp.Body.Close()
	const msg = "the backend attempted to redirect this request, which is not permitted"
	*resp = http.Response{
		StatusCode:    http.StatusBadGateway,
		Status:        fmt.Sprintf("%d %s", http.StatusBadGateway, http.StatusText(http.StatusBadGateway)),
		Body:          io.NopCloser(strings.NewReader(msg)),
		ContentLength: int64(len(msg)),
		Request:       resp.Request,
	}
}

// openAPIPrefix starts the paths of OpenAPI v3 documents.
const openAPIPrefix = "/openapi/v3/"

// sameServerOpenAPIRedirect is true for a redirect of an OpenAPI v3
// request to a path of this server's OpenAPI v3 (no scheme, no host).
func sameServerOpenAPIRedirect(resp *http.Response) bool {
	if resp.Request == nil || resp.Request.URL == nil || !strings.HasPrefix(resp.Request.URL.Path, openAPIPrefix) {
		return false
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	return err == nil && loc.Scheme == "" && loc.Host == "" && loc.User == nil &&
		strings.HasPrefix(loc.Path, openAPIPrefix) && !strings.HasPrefix(resp.Header.Get("Location"), "//")
}
