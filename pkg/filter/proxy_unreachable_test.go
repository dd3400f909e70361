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

package filter

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/egressselector"
)

// partition plays a network that drops every packet to one address while
// it is cut: a dial there waits for its own deadline. Healed, it connects
// to the listener the address stands for.
type partition struct {
	addr, to string
	cut      atomic.Bool
	mu       sync.Mutex
	dials    int
}

func (p *partition) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	p.dials++
	p.mu.Unlock()
	if addr == p.addr && p.cut.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	to := addr
	if addr == p.addr {
		to = p.to
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

func (p *partition) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dials
}

// TestProxyRemembersAPeerItCannotConnectTo: a peer whose connection timed
// out (partitioned from this server while the view still lists it ready)
// costs the first request proxy.PeerDialTimeout; the requests after its
// dial was pending over a second and a half get their 503 with Retry-After
// at once instead of each waiting the timeout again, without a dial of
// their own; once the partition heals, a probe connects and requests are
// proxied again within about a second.
func TestProxyRemembersAPeerItCannotConnectTo(t *testing.T) {
	e := newEnv(t)
	peer := upgradingPeer(e)
	p := &partition{addr: closedEndpoint(t), to: peer.endpoint()}
	p.cut.Store(true)
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.ControlPlane: p.dial})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", p.addr)))
	get := func() (*http.Response, string, time.Duration) {
		start := time.Now()
		resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
		body := readBody(t, resp)
		return resp, body, time.Since(start)
	}

	type answer struct {
		code       int
		retryAfter string
		took       time.Duration
	}
	first := make(chan answer, 1)
	go func() {
		resp, _, took := get()
		first <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), took}
	}()
	// A dial pending for two seconds was dropped: a request arriving then
	// does not wait for a dial of its own.
	time.Sleep(2 * time.Second)
	resp, body, took := get()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took > time.Second {
		t.Fatalf("GET while the first dial is pending: %d (Retry-After %q) after %s %q, want 503 with Retry-After at once", resp.StatusCode, resp.Header.Get("Retry-After"), took, body)
	}
	if a := <-first; a.code != http.StatusServiceUnavailable || a.retryAfter == "" || a.took < proxy.PeerDialTimeout {
		t.Fatalf("first GET, partitioned: %d (Retry-After %q) after %s, want 503 with Retry-After after the %s dial timeout", a.code, a.retryAfter, a.took, proxy.PeerDialTimeout)
	}
	for i := range 3 {
		before := p.count()
		resp, body, took = get()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took > time.Second {
			t.Fatalf("GET %d after the timeout: %d (Retry-After %q) after %s %q, want 503 with Retry-After at once", i+2, resp.StatusCode, resp.Header.Get("Retry-After"), took, body)
		}
		// Only the probe dials (at most once per probe interval and
		// timeout); the request itself made no dial.
		if n := p.count() - before; n > 1 {
			t.Fatalf("GET %d: %d dials meanwhile, want the probe's at most", i+2, n)
		}
	}
	if n := len(peer.requests()); n != 0 {
		t.Fatalf("the partitioned peer got %d requests", n)
	}

	p.cut.Store(false)
	healed := time.Now()
	for {
		resp, body, _ = get()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Since(healed) > 3*time.Second {
			t.Fatalf("3 s after the partition healed: %d %q, want 200", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(peer.requests()); n != 1 {
		t.Fatalf("the peer got %d requests after the heal, want 1", n)
	}
}

// TestProxyDoesNotRememberARefusedConnection: a refused connection fails
// at once by itself and is not remembered; the next request dials again
// (here, a listener started meanwhile answers it).
func TestProxyDoesNotRememberARefusedConnection(t *testing.T) {
	e := newEnv(t)
	peer := upgradingPeer(e)
	refused := closedEndpoint(t)
	var up atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		if addr == refused && up.Load() {
			return d.DialContext(ctx, network, peer.endpoint())
		}
		return d.DialContext(ctx, network, addr)
	}
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.ControlPlane: dial})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", refused)))

	resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
	if body := readBody(t, resp); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET, connection refused: %d %q, want 503", resp.StatusCode, body)
	}
	up.Store(true)
	resp = e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
	if body := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET once the peer listens: %d %q, want 200 (a refusal is not remembered)", resp.StatusCode, body)
	}
}
