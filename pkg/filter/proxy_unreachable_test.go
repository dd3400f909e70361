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
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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
// costs the first request proxy.PeerDialTimeout; the requests after it get
// their 503 with Retry-After at once instead of each waiting the timeout
// again, without a dial of their own; once the partition heals, a probe
// connects and requests are proxied again within seconds.
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

	resp, body, took := get()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took < proxy.PeerDialTimeout {
		t.Fatalf("first GET, partitioned: %d (Retry-After %q) after %s %q, want 503 with Retry-After after the %s dial timeout", resp.StatusCode, resp.Header.Get("Retry-After"), took, body, proxy.PeerDialTimeout)
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
		// A probe through the egress dialer is bounded as the dial it
		// stands for: one cut off at the heal ends within 5 s.
		if time.Since(healed) > proxy.PeerDialTimeout+3*time.Second {
			t.Fatalf("%s after the partition healed: %d %q, want 200", proxy.PeerDialTimeout+3*time.Second, resp.StatusCode, body)
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

// droppingEndpoint is a loopback address whose listener drops every new
// SYN: its accept queue (backlog 0) is full with one connection that is
// never accepted, so a dial there waits for its deadline, as across a
// partition.
func droppingEndpoint(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = filler.Close() })
	if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		_ = c.Close()
		t.Skip("this kernel accepts connections past a full accept queue")
	}
	return addr
}

// TestProxySuspectsADirectDialPendingTooLong: a direct dial pending over a
// second and a half was dropped (a SYN is answered in milliseconds, a lost
// one resent after a second), so a request arriving then gets its 503 with
// Retry-After at once instead of a dial of its own that waits the whole
// timeout too.
func TestProxySuspectsADirectDialPendingTooLong(t *testing.T) {
	e := newEnv(t)
	addr := droppingEndpoint(t)
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", addr)))
	get := func() (*http.Response, time.Duration) {
		start := time.Now()
		resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
		_ = readBody(t, resp)
		return resp, time.Since(start)
	}
	first := make(chan time.Duration, 1)
	go func() {
		resp, took := get()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("first GET: %d, want 503", resp.StatusCode)
		}
		first <- took
	}()
	time.Sleep(2 * time.Second)
	resp, took := get()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || took > time.Second {
		t.Fatalf("GET while the first dial is pending: %d (Retry-After %q) after %s, want 503 with Retry-After at once", resp.StatusCode, resp.Header.Get("Retry-After"), took)
	}
	if took := <-first; took < proxy.PeerDialTimeout {
		t.Fatalf("first GET answered after %s, want after the %s dial timeout", took, proxy.PeerDialTimeout)
	}
}

// TestProxyWaitsForASlowEgressDial: an egress proxy that takes two seconds
// to connect (a slow CONNECT, a konnectivity dial) is a path that works:
// a request that arrives while the first connection is being made is
// proxied too, not answered 503 because a dial took longer than a SYN
// would.
func TestProxyWaitsForASlowEgressDial(t *testing.T) {
	e := newEnv(t)
	peer := upgradingPeer(e)
	advertised := closedEndpoint(t)
	slow := func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, peer.endpoint())
	}
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.ControlPlane: slow})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", advertised)))
	codes := make(chan int, 2)
	for i, delay := range []time.Duration{0, 1700 * time.Millisecond} {
		go func() {
			time.Sleep(delay)
			resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
			body := readBody(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %d (sent after %s) through a slow egress dialer: %d %q, want 200", i+1, delay, resp.StatusCode, body)
			}
			codes <- resp.StatusCode
		}()
	}
	<-codes
	<-codes
}
