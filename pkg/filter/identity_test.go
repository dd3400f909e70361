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
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/test/hostileheaders"
)

const widgetsPath = "/apis/example.com/v1/namespaces/ns1/widgets"

// checkPeerSawExactly checks that the peer saw exactly the source's user
// (through its request-header authenticator), the loop header and the
// source's Audit-ID, and none of the client's credentials or impersonation.
func checkPeerSawExactly(t testing.TB, s seenRequest, want user.Info, auditID string) {
	t.Helper()
	if s.AuthErr != nil || s.User == nil {
		t.Fatalf("peer's request-header authenticator: user %v, err %v", s.User, s.AuthErr)
	}
	if s.User.GetName() != want.GetName() || s.User.GetUID() != want.GetUID() ||
		!reflect.DeepEqual(nonEmpty(s.User.GetGroups()), nonEmpty(want.GetGroups())) ||
		!reflect.DeepEqual(nonEmptyMap(s.User.GetExtra()), nonEmptyMap(want.GetExtra())) {
		t.Fatalf("peer authenticated %#v, want %#v", s.User, want)
	}
	if got := s.Header.Values(PeerProxiedHeader); !reflect.DeepEqual(got, []string{"true"}) {
		t.Fatalf("peer saw %s %q, want [true]", PeerProxiedHeader, got)
	}
	if got := s.Header.Values("Audit-Id"); !reflect.DeepEqual(got, []string{auditID}) {
		t.Fatalf("peer saw Audit-ID %q, want [%s]", got, auditID)
	}
	for k := range s.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "impersonate-") || lk == "authorization" || strings.Contains(lk, "idempotency-key") {
			t.Fatalf("peer saw the client's %s header", k)
		}
	}
}

func nonEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func nonEmptyMap(m map[string][]string) map[string][]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// TestProxyHostileHeaderSets: whatever identity, loop, audit or
// hop-by-hop headers a client sends, over HTTP/1.1 or HTTP/2, the peer sees
// exactly the authenticated user. Before #11 the reverse proxy stripped the
// headers named by the client's Connection header after setting identity.
func TestProxyHostileHeaderSets(t *testing.T) {
	sets := hostileheaders.Sets("scopes", "authentication.k8s.io/pod-id")
	for _, proto := range []struct {
		name string
		opts []envOption
	}{{"HTTP/1.1", nil}, {"HTTP/2", []envOption{frontHTTP2}}} {
		t.Run(proto.name, func(t *testing.T) {
			e := newEnv(t, proto.opts...)
			peer := e.newPeer(nil)
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
			sent := 0
			for _, set := range sets {
				if set.HTTP1Only && proto.name == "HTTP/2" {
					continue
				}
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					var body *strings.Reader
					if method == http.MethodPost {
						body = strings.NewReader(`{"kind":"Widget"}`)
					}
					req := e.newRequest(method, widgetsPath, nil)
					if body != nil {
						req = e.newRequest(method, widgetsPath, body)
					}
					for k, v := range set.Header {
						req.Header[k] = v
					}
					resp := e.do(req)
					readBody(t, resp)
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("%s %s: %d", set.Name, method, resp.StatusCode)
					}
					seen := peer.requests()
					if len(seen) != sent+1 {
						t.Fatalf("%s %s: peer saw %d requests, want %d", set.Name, method, len(seen), sent+1)
					}
					sent++
					t.Run("", func(t *testing.T) {
						checkPeerSawExactly(t, seen[len(seen)-1], alice(), resp.Header.Get("Audit-Id"))
						checkProxiedAsAlice(t, seen[len(seen)-1])
					})
					if t.Failed() {
						t.Fatalf("header set %q (%s): %v", set.Name, method, set.Header)
					}
				}
			}
			t.Logf("%d requests, %d header sets", sent, sent/2)
		})
	}
}

// FuzzProxyIdentity: random client header sets (lines "Name: value"; a
// Connection line names other headers) → the peer's request-header
// authenticator sees exactly the source's user.
func FuzzProxyIdentity(f *testing.F) {
	for _, set := range hostileheaders.Sets("scopes") {
		var b strings.Builder
		for k, vs := range set.Header {
			for _, v := range vs {
				b.WriteString(k + ": " + v + "\n")
			}
		}
		f.Add(b.String(), uint8(0))
	}
	f.Add("Connection: X-Remote-User, X-Remote-Group, X-Remote-Uid, X-Remote-Extra-Scopes\nAuthorization: Bearer stolen\n", uint8(1))
	f.Add("Connection: Audit-Id\nAudit-Id: chosen-by-client\n", uint8(2))
	f.Add("Te: trailers\nTrailer: X-Remote-User\nConnection: Te, Trailer\n", uint8(3))
	f.Fuzz(func(t *testing.T, headers string, who uint8) {
		h := http.Header{}
		for _, line := range strings.Split(headers, "\n") {
			k, v, ok := strings.Cut(line, ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !ok || !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			switch http.CanonicalHeaderKey(k) {
			case "Host", "Content-Length", "Transfer-Encoding", "Expect", "Upgrade":
				// Framing, not identity: the client library owns them.
				continue
			case PeerProxiedHeader:
				if strings.EqualFold(v, "true") {
					// The client's own request is then served locally.
					continue
				}
			}
			h.Add(k, v)
		}
		users := []*user.DefaultInfo{alice(), {Name: "bob"}, {Name: "carol", UID: "c-1", Groups: []string{"g"}}}
		u := users[int(who)%len(users)]

		e := newEnv(t)
		e.user.Store(u)
		peer := e.newPeer(nil)
		e.setLocal()
		e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
		req, err := http.NewRequest(http.MethodPost, e.front.URL+widgetsPath, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		resp.Body.Close()
		seen := peer.requests()
		if resp.StatusCode != http.StatusOK || len(seen) != 1 {
			t.Fatalf("status %d, peer saw %d requests", resp.StatusCode, len(seen))
		}
		checkPeerSawExactly(t, seen[0], u, resp.Header.Get("Audit-Id"))
	})
}

// TestClientGoPostAtMostOnce: a client-go POST (generateName, MaxRetries 3)
// that reaches a peer which drops it after reading the body is carried out
// at most once: the filter does not resend it, and its answer has no
// Retry-After, so client-go does not either. Before #11 the answer was 503
// with Retry-After and the peer received the POST 4 times.
func TestClientGoPostAtMostOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		peerHTTP1 bool
		drop      func(w http.ResponseWriter)
	}{
		{"HTTP/2 stream reset", false, func(http.ResponseWriter) { panic(http.ErrAbortHandler) }},
		{"HTTP/1.1 connection closed", true, func(w http.ResponseWriter) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, frontHTTP2)
			var received atomic.Int32
			peer := e.newUnstartedPeer(func(w http.ResponseWriter, r *http.Request) {
				received.Add(1)
				tc.drop(w)
			})
			if tc.peerHTTP1 {
				peer.EnableHTTP2 = false
				peer.TLS.NextProtos = []string{"http/1.1"}
			}
			peer.StartTLS()
			other := e.newPeer(nil)
			ids := order("p1", "p2")
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer(ids[0], peer.endpoint()), readyPeer(ids[1], other.endpoint())))

			client := e.restClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res := client.Post().AbsPath(widgetsPath).
				Body([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"generateName":"w-"}}`)).
				MaxRetries(3).Do(ctx)
			var code int
			res.StatusCode(&code)
			if n := received.Load(); n != 1 {
				t.Fatalf("the peer received the POST %d times, want 1", n)
			}
			if n := len(other.requests()); n != 0 {
				t.Fatalf("the POST was replayed to another peer %d times", n)
			}
			if code != http.StatusBadGateway || res.Error() == nil {
				t.Fatalf("client-go got %d, %v; want 502", code, res.Error())
			}
		})
	}
}

// restClient is a client-go RESTClient to the front server, as a
// controller's would be.
func (e *env) restClient(t testing.TB) *rest.RESTClient {
	t.Helper()
	cfg := &rest.Config{
		Host:            e.front.URL,
		TLSClientConfig: rest.TLSClientConfig{Insecure: false},
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &schema.GroupVersion{Group: "example.com", Version: "v1"},
			NegotiatedSerializer: testSerializer,
			ContentType:          "application/json",
		},
	}
	// The front's test certificate: trust exactly it.
	cfg.Transport = e.client.Transport
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProxyResponseHeaderTimeout: a peer that takes a request and never
// answers is given up after PeerResponseHeaderTimeout: a write gets 504
// without Retry-After and is not resent; a read goes to the next peer; a
// watch (long-running) is not cut.
func TestProxyResponseHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, peerHeaderTimeout(timeout))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var silentGot atomic.Int32
	silent := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		silentGot.Add(1)
		if r.URL.Query().Get("watch") == "true" {
			// A watch that sends its first event late.
			time.Sleep(3 * timeout)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"type":"ADDED","object":{"kind":"Widget"}}` + "\n"))
			return
		}
		<-release
	})
	other := e.newPeer(nil)
	ids := order("p1", "p2")
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer(ids[0], silent.endpoint()), readyPeer(ids[1], other.endpoint())))

	t.Run("POST: 504, not resent", func(t *testing.T) {
		start := time.Now()
		resp := e.do(e.newRequest(http.MethodPost, widgetsPath, strings.NewReader(`{}`)))
		checkSentButFailed504(t, resp, readBody(t, resp), ids[0])
		if took := time.Since(start); took > 10*timeout {
			t.Errorf("took %v with a %v header timeout", took, timeout)
		}
		if len(other.requests()) != 0 {
			t.Fatal("the POST was resent to another peer")
		}
		if got := e.annotations(resp.Header.Get("Audit-Id")); got[AuditProxiedTo] != ids[0] || got[AuditError] != "did not answer in time" {
			t.Fatalf("audit annotations %v", got)
		}
	})
	t.Run("GET: answered by the next peer", func(t *testing.T) {
		resp := e.do(e.newRequest(http.MethodGet, widgetsPath+"/w1", nil))
		if body := readBody(t, resp); resp.StatusCode != http.StatusOK || body != `{"kind":"Widget"}` {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if got := e.annotations(resp.Header.Get("Audit-Id")); got[AuditProxiedTo] != ids[1] || got[AuditFailedOver] != ids[0] {
			t.Fatalf("audit annotations %v", got)
		}
	})
	t.Run("watch: not timed out", func(t *testing.T) {
		resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets?watch=true", nil))
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(line, "ADDED") {
			t.Fatalf("watch: %d %q %v", resp.StatusCode, line, err)
		}
	})
}

func checkSentButFailed504(t *testing.T, resp *http.Response, body, peerID string) {
	t.Helper()
	checkSentButFailed(t, resp, body, http.StatusGatewayTimeout, peerID)
	if !strings.Contains(body, `"reason":"`+string(metav1.StatusReasonTimeout)+`"`) {
		t.Errorf("504 reason is not Timeout: %s", body)
	}
}

// TestProxyAuditAnnotations: the source's audit event names the decision
// and the peer that took the request; the peer gets the same Audit-ID.
func TestProxyAuditAnnotations(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	ids := order("p1", "p2")
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer(ids[0], closedEndpoint(t)), readyPeer(ids[1], peer.endpoint())))
	req := e.newRequest(http.MethodPost, widgetsPath, strings.NewReader(`{}`))
	req.Header.Set("Audit-Id", "chosen-by-the-client")
	resp := e.do(req)
	readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Values("Audit-Id"); !reflect.DeepEqual(got, []string{"chosen-by-the-client"}) {
		t.Fatalf("response Audit-Id %q, want the source's only", got)
	}
	checkPeerSawExactly(t, peer.requests()[0], alice(), "chosen-by-the-client")
	want := map[string]string{AuditDecision: "Proxy", AuditProxiedTo: ids[1], AuditFailedOver: ids[0]}
	if got := e.annotations("chosen-by-the-client"); !reflect.DeepEqual(got, want) {
		t.Fatalf("audit annotations %v, want %v", got, want)
	}

	e.setRoutes(route(widgetsGVR, readyPeer(ids[0], closedEndpoint(t))))
	resp = e.do(e.newRequest(http.MethodPost, widgetsPath, strings.NewReader(`{}`)))
	body := readBody(t, resp)
	checkUnavailable(t, resp, body, "no peer serving it accepts connections, so none is expected back within seconds (tried "+ids[0]+")", 0)
	if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "refused") {
		t.Fatalf("503 carries a network detail: %s", body)
	}
	if got := e.annotations(resp.Header.Get("Audit-Id")); got[AuditError] != "no peer could take the request" {
		t.Fatalf("audit annotations %v", got)
	}
}
