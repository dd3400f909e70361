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
	"context"
	"errors"
	"sync"
)

// errPeerStopped ends the requests in flight to a peer that the view
// marked not ready because it stopped answering (frozen, cut off, crashed;
// not one that departed gracefully: the filter decides, StopPeer). It counts as a
// timeout: a write it ends gets 504, never a retry.
var errPeerStopped error = peerStoppedError{}

type peerStoppedError struct{}

func (peerStoppedError) Error() string {
	return "the peer stopped answering (peerdiscovery marked it not ready) while the request was in flight"
}
func (peerStoppedError) Timeout() bool   { return true }
func (peerStoppedError) Temporary() bool { return true }

// peerStopped tells whether an attempt ended because its peer stopped.
func peerStopped(attempt context.Context) bool {
	return errors.Is(context.Cause(attempt), errPeerStopped)
}

// inflight lets the requests in flight to a peer be ended at once when the
// view marks it not ready, instead of waiting for a timeout: each attempt's
// context is bound to its peer's current scope, and stopping the peer
// cancels the scope (later attempts get a new one).
type inflight struct {
	scopes sync.Map // peer ID -> *peerScope
}

type peerScope struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// bind returns the context of one attempt at a peer: it ends with the
// request, or with errPeerStopped when the peer is stopped. release ends
// it, and tells whether the peer was stopped meanwhile.
func (in *inflight) bind(ctx context.Context, id string) (attempt context.Context, release func() (stopped bool)) {
	actx, cancel := context.WithCancelCause(ctx)
	var s *peerScope
	if v, ok := in.scopes.Load(id); ok {
		s = v.(*peerScope)
	} else {
		sctx, scancel := context.WithCancelCause(context.Background())
		v, loaded := in.scopes.LoadOrStore(id, &peerScope{ctx: sctx, cancel: scancel})
		if loaded {
			scancel(nil)
		}
		s = v.(*peerScope)
	}
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	return actx, func() bool {
		stopped := errors.Is(context.Cause(actx), errPeerStopped)
		stop()
		cancel(nil)
		return stopped
	}
}

// StopPeer ends every request in flight to a peer at once (it counts as
// the peer's timeout) instead of waiting for one.
func (p *Proxier) StopPeer(id string) { p.inflight.stop(id) }

// stop ends every request in flight to a peer.
func (in *inflight) stop(id string) {
	if s, ok := in.scopes.LoadAndDelete(id); ok {
		s.(*peerScope).cancel(errPeerStopped)
	}
}
