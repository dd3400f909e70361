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
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
	testpki "sigs.k8s.io/peerdiscovery/test/pki"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/egressselector"
)

// egressDialer plays an egress selector's dialer (an HTTP CONNECT or
// konnectivity proxy): it records every address it is asked for and
// connects to the one the test maps it to. A peer advertised at an
// address nothing listens on is then reached through it only.
type egressDialer struct {
	to    map[string]string // asked -> the listener it reaches
	mu    sync.Mutex
	asked []string
}

func (d *egressDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.asked = append(d.asked, addr)
	d.mu.Unlock()
	to, ok := d.to[addr]
	if !ok {
		return nil, fmt.Errorf("proxy error while dialing %s, code 403: 403 Forbidden", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, to)
}

func (d *egressDialer) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked)
}

// withEgressSelector wraps the env's filter again, as kube-apiserver does,
// with an egress selector of the given network contexts.
func withEgressSelector(e *env, dialers map[egressselector.EgressType]utilnet.DialFunc) {
	e.f.WrapHandler(e.local, &genericapiserver.Config{
		APIServerID: selfID, Serializer: testSerializer,
		EgressSelector: egressselector.NewEgressSelectorWithMap(dialers),
	})
}

// upgradingPeer answers an upgrade with 101 and echoes one line, any other
// request with a Widget.
func upgradingPeer(e *env) *testPeer {
	return e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, `{"kind":"Widget"}`)
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			e.t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
		_ = brw.Flush()
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		_, _ = brw.WriteString("echo: " + line)
		_ = brw.Flush()
	})
}

// execThroughFront sends an exec upgrade to the env's front and returns
// the status and the echo of one line ("" when not upgraded).
func execThroughFront(t *testing.T, e *env) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", e.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/ns1/pods/p1/exec?command=sh&stdin=true HTTP/1.1\r\nHost: front\r\n"+
		"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return resp.StatusCode, ""
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, line
}

// TestProxyDialsPeersThroughTheEgressSelector: with a controlplane network
// context, every connection to a peer is made by its dialer (proxied
// requests and upgrades alike), and TLS to the peer is verified as without
// it.
func TestProxyDialsPeersThroughTheEgressSelector(t *testing.T) {
	e := newEnv(t)
	peer := upgradingPeer(e)
	_, _, rogueCert := testpki.NewCA(t, "rogue-ca").Issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, []string{peerServerName}, nil)
	rogue := newTestPeer(t, e.pki, rogueCert, nil)
	// The advertised endpoints: nothing listens there, so a direct dial
	// would be refused.
	advertised, rogueAdvertised := closedEndpoint(t), closedEndpoint(t)
	d := &egressDialer{to: map[string]string{advertised: peer.endpoint(), rogueAdvertised: rogue.endpoint()}}
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.ControlPlane: d.dial})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", advertised)), route(podsGVR, readyPeer("b", advertised)))

	resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
	if got := readBody(t, resp); resp.StatusCode != http.StatusOK || got != `{"kind":"Widget"}` {
		t.Fatalf("GET through the egress dialer: %d %q", resp.StatusCode, got)
	}
	seen := peer.requests()
	if len(seen) != 1 || seen[0].Host != advertised {
		t.Fatalf("peer saw %+v, want one request to Host %s", seen, advertised)
	}
	checkProxiedAsAlice(t, seen[0])
	if got := d.calls(); !slices.Equal(got, []string{advertised}) {
		t.Fatalf("egress dialer asked for %v, want [%s]", got, advertised)
	}

	// An upgrade dials a connection of its own, through the same dialer.
	if code, echo := execThroughFront(t, e); code != http.StatusSwitchingProtocols || echo != "echo: ping\n" {
		t.Fatalf("exec through the egress dialer: %d, stream %q", code, echo)
	}
	if got := d.calls(); !slices.Equal(got, []string{advertised, advertised}) {
		t.Fatalf("egress dialer asked for %v, want the peer twice (the GET's connection, the upgrade's)", got)
	}
	if seen := peer.requests(); len(seen) != 2 {
		t.Fatalf("peer got %d requests, want 2", len(seen))
	} else {
		checkProxiedAsAlice(t, seen[1])
	}

	// TLS is the transport's: a serving certificate the peer CA did not
	// sign is refused through the egress dialer too.
	e.setRoutes(route(widgetsGVR, readyPeer("b", rogueAdvertised)))
	resp = e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
	if body := readBody(t, resp); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a peer with a rogue serving certificate answered %d %q, want 503", resp.StatusCode, body)
	}
	if n := len(rogue.requests()); n != 0 {
		t.Fatalf("the rogue peer got %d requests", n)
	}
	if got := d.calls(); len(got) != 3 || got[2] != rogueAdvertised {
		t.Fatalf("egress dialer asked for %v, want the rogue peer last", got)
	}
}

// TestProxyNeverDialsDirectlyWhenTheEgressDialerFails: a peer the egress
// dialer cannot reach is not reached directly instead, even when it could
// be: the candidate failed before anything was sent (503, Retry-After).
func TestProxyNeverDialsDirectlyWhenTheEgressDialerFails(t *testing.T) {
	e := newEnv(t)
	peer := upgradingPeer(e)
	d := &egressDialer{} // reaches nothing
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.ControlPlane: d.dial})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())), route(podsGVR, readyPeer("b", peer.endpoint())))

	resp := e.do(e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
	if body := readBody(t, resp); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST with the egress dialer failing: %d (Retry-After %q) %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if code, _ := execThroughFront(t, e); code != http.StatusServiceUnavailable {
		t.Fatalf("exec with the egress dialer failing: %d, want 503", code)
	}
	if n := len(peer.requests()); n != 0 {
		t.Fatalf("the peer got %d requests directly", n)
	}
	if got := d.calls(); len(got) != 2 {
		t.Fatalf("egress dialer asked for %v, want the peer twice", got)
	}
}

// TestProxyDialsDirectlyWithoutAControlPlaneContext: an egress selector
// without the controlplane network context (only etcd or cluster
// traffic goes through a proxy) leaves peers dialled directly, as without
// any.
func TestProxyDialsDirectlyWithoutAControlPlaneContext(t *testing.T) {
	e := newEnv(t)
	peer := upgradingPeer(e)
	other := func(_ context.Context, _, addr string) (net.Conn, error) {
		t.Errorf("the cluster network context's dialer was asked for %s", addr)
		return nil, fmt.Errorf("not for peers")
	}
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.Cluster: other, egressselector.Etcd: other})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())), route(podsGVR, readyPeer("b", peer.endpoint())))

	resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
	if got := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %q", resp.StatusCode, got)
	}
	if code, echo := execThroughFront(t, e); code != http.StatusSwitchingProtocols || echo != "echo: ping\n" {
		t.Fatalf("exec: %d, stream %q", code, echo)
	}
	if n := len(peer.requests()); n != 2 {
		t.Fatalf("peer got %d requests, want 2", n)
	}
}

// TestProxyBoundsAHungEgressDial: an egress dialer that never returns (a
// proxy that took the connection and never answers the CONNECT: the
// egress selector's HTTP CONNECT dialer waits for its answer without a
// deadline) holds no request longer than a direct dial would: after
// proxy.PeerDialTimeout the candidate counts as not reached, for a proxied
// request and an upgrade alike.
func TestProxyBoundsAHungEgressDial(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	hung := func(context.Context, string, string) (net.Conn, error) {
		<-release
		return nil, fmt.Errorf("released")
	}
	withEgressSelector(e, map[egressselector.EgressType]utilnet.DialFunc{egressselector.ControlPlane: hung})
	t.Cleanup(func() { close(release) })
	e.setLocal()
	advertised := closedEndpoint(t)
	e.setRoutes(route(widgetsGVR, readyPeer("b", advertised)), route(podsGVR, readyPeer("b", advertised)))

	bound := proxy.PeerDialTimeout + 3*time.Second
	t.Run("GET", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
		body := readBody(t, resp)
		if took := time.Since(start); resp.StatusCode != http.StatusServiceUnavailable || took > bound {
			t.Fatalf("GET through a hung egress dialer: %d after %s %q, want 503 within %s", resp.StatusCode, took, body, bound)
		}
	})
	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		if code, _ := execThroughFront(t, e); code != http.StatusServiceUnavailable || time.Since(start) > bound {
			t.Fatalf("exec through a hung egress dialer: %d after %s, want 503 within %s", code, time.Since(start), bound)
		}
	})
}
