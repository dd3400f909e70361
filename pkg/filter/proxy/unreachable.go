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
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// When an endpoint is marked, and how it is probed: a direct dial still
// pending after suspectAfter marks it (a peer answers a SYN within
// milliseconds, and the kernel resends a lost one after a second: one
// pending longer was dropped, as a partition drops every packet), so that
// the requests arriving after that second do not each wait
// PeerDialTimeout too; a probe makes one connection at a time, each
// bounded by probeTimeout (PeerDialTimeout through the egress selector),
// probeInterval apart, for at most maxUnreachableMark (then the mark goes,
// and the next request's own dial decides again). A SYN lost by chance
// marks an endpoint for about a second: the probe connects at once.
const (
	suspectAfter       = 1500 * time.Millisecond
	probeTimeout       = time.Second
	probeInterval      = 500 * time.Millisecond
	maxUnreachableMark = time.Minute
)

// errUnreachable fails at once a dial to an endpoint marked unreachable.
// It is a dial error: the attempt did not reach the peer, so the next
// candidate is tried, and a 503 names a wait (the probe clears the mark
// within about a second of a connection becoming possible).
var errUnreachable = errors.New("a connection to it timed out and none could be made since (partitioned from this server, or unreachable); a probe keeps trying")

// unreachable remembers the peer endpoints a TCP connection could not be
// made to in time (suspectAfter): a partition between this server and a
// peer drops the packets, so every new connection waits PeerDialTimeout
// (5 s) and fails.
// The view (the extension's replicas, which may still reach the peer) can
// keep listing it ready, so without this every request routed there waits
// the whole timeout before it fails over or gets its 503; with it, only
// the first does. A probe connects again in the background and clears the
// mark as soon as a connection is made: a healed partition is used within
// about a second. A connection refused is not marked: it fails at once by
// itself. A TLS handshake timeout is not marked either: it may come from
// this server's own CPU starvation, and a frozen peer is the view's to
// stop (StopPeer).
type unreachable struct {
	mu    sync.Mutex
	marks map[string]struct{}
	// ctx ends the probes (the Proxier's Run context; Background before).
	ctx context.Context
}

// marked tells whether dials to addr fail at once.
func (u *unreachable) marked(addr string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.marks[addr]
	return ok
}

// mark records that a dial to addr timed out and starts its probe, which
// dials with probe and waits on clk, unless addr is marked already.
func (u *unreachable) mark(addr string, clk clock.Clock, probe func(ctx context.Context) error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.marks[addr]; ok {
		return
	}
	if u.marks == nil {
		u.marks = map[string]struct{}{}
	}
	u.marks[addr] = struct{}{}
	klog.Background().Info("peerdiscovery filter: a connection to a peer endpoint could not be made in time; its requests fail at once (the next candidate, or 503) until a probe connects", "endpoint", addr)
	ctx := u.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	go u.probe(ctx, clk, addr, probe)
}

func (u *unreachable) unmark(addr string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.marks, addr)
}

// probe connects to addr until a connection is made, or refused (nothing
// to wait for: requests are refused at once), or maxUnreachableMark has
// passed, and then clears the mark.
func (u *unreachable) probe(ctx context.Context, clk clock.Clock, addr string, dial func(ctx context.Context) error) {
	defer u.unmark(addr)
	giveUp := clk.Now().Add(maxUnreachableMark)
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := dial(pctx)
		cancel()
		if err == nil || errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil || clk.Now().After(giveUp) {
			klog.Background().Info("peerdiscovery filter: peer endpoint no longer marked unreachable", "endpoint", addr, "probeErr", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(probeInterval):
		}
	}
}

// dialTimedOut tells whether a dial failed by its own timeout, not because
// the dial's context ended (no request wants the connection any more).
func dialTimedOut(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// unreachableError is the dial error of an endpoint marked unreachable.
func unreachableError(network, addr string) error {
	return &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("%s: %w", addr, errUnreachable)}
}
