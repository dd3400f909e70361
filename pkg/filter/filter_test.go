package filter

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	testpki "sigs.k8s.io/peerdiscovery/test/pki"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// wantIdentity is what a peer must see for alice, header by header.
var wantIdentity = http.Header{
	"X-Remote-User":         {"alice"},
	"X-Remote-Uid":          {"uid-alice-1"},
	"X-Remote-Group":        {"devs", "system:authenticated"},
	"X-Remote-Extra-Scopes": {"read", "write"},
	// The key is %-escaped as upstream's authenticating proxy does; the
	// peer's authenticator unescapes it.
	"X-Remote-Extra-Authentication.k8s.io%2fpod-Id": {"pod-1"},
}

// checkProxiedAsAlice checks that a request reached a peer as a
// kube-apiserver proxying for alice: client certificate verified, identity
// headers from the context user only, loop header set.
func checkProxiedAsAlice(t *testing.T, s seenRequest) {
	t.Helper()
	if s.ClientCN != frontProxyClientName {
		t.Errorf("peer saw client certificate CN %q, want %q", s.ClientCN, frontProxyClientName)
	}
	if got := remoteHeaders(s.Header); !reflect.DeepEqual(got, wantIdentity) {
		t.Errorf("peer saw identity headers\n%v\nwant\n%v", got, wantIdentity)
	}
	if got := s.Header.Get(PeerProxiedHeader); got != "true" {
		t.Errorf("%s = %q, want true", PeerProxiedHeader, got)
	}
	if s.AuthErr != nil || s.User == nil {
		t.Fatalf("peer's request-header authenticator: user %v, err %v", s.User, s.AuthErr)
	}
	want := alice()
	if s.User.GetName() != want.Name || s.User.GetUID() != want.UID ||
		!reflect.DeepEqual(s.User.GetGroups(), want.Groups) || !reflect.DeepEqual(s.User.GetExtra(), want.Extra) {
		t.Errorf("peer authenticated %#v, want %#v", s.User, want)
	}
}

func TestHandlerDecisions(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	ep := peer.endpoint()
	tables := []*v1alpha1.PeerRoutingTable{
		route(podsGVR, readyPeer(selfID, "self:1"), readyPeer("b", ep)),
		route(widgetsGVR, readyPeer(selfID, "self:1"), readyPeer("b", ep)),
		route(crdGVR, readyPeer("b", ep)),
		route(schemaGVR("example.com", "v1", "selfish"), readyPeer(selfID, "self:1")),
		route(schemaGVR("example.com", "v1", "sleepy"), v1alpha1.RoutingPeer{ServerID: "b", Endpoint: ep}),
		route(schemaGVR("example.com", "v1", "departed"), v1alpha1.RoutingPeer{ServerID: "b", Endpoint: ep, Ready: true, Left: true}),
	}
	tables[2].Status.ClusterWide, tables[2].Status.ClusterWideSource = true, "CustomResourceDefinition"
	e.setRoutes(tables...)

	const (
		local = iota
		proxied
		unavailable
	)
	cases := []struct {
		name     string
		path     string
		header   http.Header
		unsynced bool
		want     int
		// inGrace: within SyncGracePeriod of the post-start hook.
		inGrace bool
	}{
		{"non-resource request", "/healthz", nil, false, local, false},
		{"discovery of this server's own view", "/apis", http.Header{PeerProxiedHeader: {"true"}}, false, local, false},
		{"served locally", "/api/v1/namespaces/ns1/pods/p1", nil, false, local, false},
		{"cluster-wide", "/apis/crd.example.com/v1/things", nil, false, local, false},
		{"already proxied (loop header)", "/apis/example.com/v1/namespaces/ns1/widgets", http.Header{PeerProxiedHeader: {"true"}}, false, local, false},
		{"loop header with another value does not count", "/apis/example.com/v1/namespaces/ns1/widgets", http.Header{PeerProxiedHeader: {"yes"}}, false, proxied, false},
		{"unknown: local chain answers 404", "/apis/nowhere.example.com/v1/ghosts", nil, false, local, false},
		{"only this server listed: local chain", "/apis/example.com/v1/selfish", nil, false, local, false},
		{"caches not synced, grace over: everything local", "/apis/example.com/v1/namespaces/ns1/widgets", nil, true, local, false},
		{"caches not synced, in the grace: not served here, 503", "/apis/example.com/v1/namespaces/ns1/widgets", nil, true, unavailable, true},
		{"caches not synced, in the grace: served here, local", "/api/v1/namespaces/ns1/pods/p1", nil, true, local, true},
		{"caches not synced, in the grace: already proxied, local", "/apis/example.com/v1/namespaces/ns1/widgets", http.Header{PeerProxiedHeader: {"true"}}, true, local, true},
		{"caches not synced, in the grace: non-resource, local", "/healthz", nil, true, local, true},
		{"ready peer: proxied", "/apis/example.com/v1/namespaces/ns1/widgets/w1", nil, false, proxied, false},
		{"ready peer, subresource: proxied", "/apis/example.com/v1/namespaces/ns1/widgets/w1/status", nil, false, proxied, false},
		{"none ready: 503", "/apis/example.com/v1/sleepy", nil, false, unavailable, false},
		{"only left peers: 503", "/apis/example.com/v1/departed", nil, false, unavailable, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.f.state.isSynced.Store(!tc.unsynced)
			defer e.f.state.isSynced.Store(true)
			if tc.inGrace {
				e.f.syncDeadline.Store(time.Now().Add(time.Hour).UnixNano())
				defer e.f.syncDeadline.Store(0)
			}
			// The client's GVR is known to no routing state yet: counted
			// under one label, never under its own.
			unsyncedLabels := map[string]string{"type": "unsynced", "group": "other", "version": "other", "resource": "other"}
			clientLabels := map[string]string{"type": "unsynced", "group": "example.com", "resource": "widgets"}
			unsyncedBefore := counterValue(t, "apiserver_peer_proxy_errors_total", unsyncedLabels)
			localBefore, peerBefore := e.local.calls.Load(), len(peer.requests())
			req := e.newRequest(http.MethodGet, tc.path, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp := e.do(req)
			body := readBody(t, resp)
			localCalls, peerCalls := e.local.calls.Load()-localBefore, len(peer.requests())-peerBefore
			switch tc.want {
			case local:
				if localCalls != 1 || peerCalls != 0 || resp.Header.Get("X-Served-By") != "local" {
					t.Fatalf("want the local chain: local %d, peer %d, %d %q", localCalls, peerCalls, resp.StatusCode, body)
				}
			case proxied:
				if localCalls != 0 || peerCalls != 1 || resp.StatusCode != http.StatusOK || body != `{"kind":"Widget"}` {
					t.Fatalf("want the peer: local %d, peer %d, %d %q", localCalls, peerCalls, resp.StatusCode, body)
				}
				checkProxiedAsAlice(t, peer.requests()[peerBefore])
			case unavailable:
				if localCalls != 0 || peerCalls != 0 {
					t.Fatalf("want a 503 from the filter: local %d, peer %d", localCalls, peerCalls)
				}
				msg := "none is ready"
				if tc.unsynced {
					msg = "not synced yet"
					if d := counterValue(t, "apiserver_peer_proxy_errors_total", unsyncedLabels) - unsyncedBefore; d != 1 {
						t.Fatalf("apiserver_peer_proxy_errors_total{type=unsynced,resource=other} grew by %v, want 1", d)
					}
					if v := counterValue(t, "apiserver_peer_proxy_errors_total", clientLabels); v != 0 {
						t.Fatalf("apiserver_peer_proxy_errors_total has a series for the client's GVR: %v", v)
					}
				}
				checkUnavailable(t, resp, body, msg)
			}
		})
	}
}

func schemaGVR(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

// checkUnavailable checks a 503 with a Status body and Retry-After.
func checkUnavailable(t *testing.T, resp *http.Response, body, msg string) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Retry-After"); got != "5" {
		t.Errorf("Retry-After = %q, want 5", got)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q", ct)
	}
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, body)
	}
	if st.Kind != "Status" || st.Status != metav1.StatusFailure || st.Code != http.StatusServiceUnavailable ||
		st.Reason != metav1.StatusReasonServiceUnavailable || st.Details == nil || st.Details.RetryAfterSeconds != 5 {
		t.Errorf("unexpected Status: %s", body)
	}
	if !strings.Contains(st.Message, msg) {
		t.Errorf("message %q does not contain %q", st.Message, msg)
	}
}

func TestNoRequestInfoPassesThrough(t *testing.T) {
	e := newEnv(t)
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil))
	if e.local.calls.Load() != 1 || rec.Code != http.StatusNotFound {
		t.Fatalf("local calls %d, code %d", e.local.calls.Load(), rec.Code)
	}
}

func TestDisabledFilterIsTransparent(t *testing.T) {
	f, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := &localChain{}
	if h := f.WrapHandler(next, &genericapiserver.Config{}); h != http.Handler(next) {
		t.Fatalf("a filter without --peer-ca-file must not wrap the chain, got %T", h)
	}
	if err := f.PostStartHook(genericapiserver.PostStartHookContext{}); err != nil {
		t.Fatal(err)
	}
}

func TestProxyRelaysRequestAndResponse(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Peer", "b")
		w.Header().Add("Warning", `299 - "first"`)
		w.Header().Add("Warning", `299 - "second"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"Widget","metadata":{"name":"w1"}}`)
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	resetUpstreamMetrics()

	const body = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"size":3}}`
	// An unsorted, repeated, escaped query must arrive byte for byte.
	const query = "fieldManager=kubectl&dryRun=All&b=2&a=1&a=%2F3&labelSelector=app%3Dx"
	req := e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets?"+query, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Custom", "kept")
	resp := e.do(req)
	got := readBody(t, resp)
	if resp.StatusCode != http.StatusCreated || got != `{"kind":"Widget","metadata":{"name":"w1"}}` {
		t.Fatalf("relayed %d %q", resp.StatusCode, got)
	}
	if resp.Header.Get("X-Peer") != "b" || resp.Header.Get("Content-Type") != "application/json" ||
		!reflect.DeepEqual(resp.Header.Values("Warning"), []string{`299 - "first"`, `299 - "second"`}) {
		t.Fatalf("response headers not relayed: %v", resp.Header)
	}
	seen := peer.requests()
	if len(seen) != 1 {
		t.Fatalf("peer got %d requests", len(seen))
	}
	s := seen[0]
	if s.Method != http.MethodPost || s.Path != "/apis/example.com/v1/namespaces/ns1/widgets" || s.RawQuery != query || s.Body != body {
		t.Fatalf("peer saw %s %s?%s %q", s.Method, s.Path, s.RawQuery, s.Body)
	}
	if s.Header.Get("Content-Type") != "application/json" || s.Header.Get("X-Custom") != "kept" {
		t.Fatalf("request headers not relayed: %v", s.Header)
	}
	if s.Host != peer.endpoint() {
		t.Errorf("Host = %q, want the peer's endpoint %q", s.Host, peer.endpoint())
	}
	checkProxiedAsAlice(t, s)
	if e.local.calls.Load() != 0 {
		t.Fatal("local chain called")
	}
	if v := counterValue(t, "apiserver_rerouted_request_total", map[string]string{"code": "201", "group": "example.com", "version": "v1", "resource": "widgets"}); v != 1 {
		t.Fatalf("apiserver_rerouted_request_total{code=201} = %v, want 1", v)
	}
}

func TestProxyReplacesClientIdentityHeaders(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))

	forge := func(req *http.Request) {
		req.Header.Set("X-Remote-User", "mallory")
		req.Header.Set("X-Remote-Uid", "uid-mallory")
		req.Header.Add("X-Remote-Group", "system:masters")
		req.Header.Add("X-Remote-Group", "devs")
		req.Header.Set("X-Remote-Extra-Scopes", "admin")
		req.Header.Set("X-Remote-Extra-Forged", "yes")
		req.Header["x-remote-extra-lower"] = []string{"yes"}
	}
	t.Run("alice", func(t *testing.T) {
		req := e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil)
		forge(req)
		readBody(t, e.do(req))
		seen := peer.requests()
		checkProxiedAsAlice(t, seen[len(seen)-1])
	})
	t.Run("user without uid, groups or extra", func(t *testing.T) {
		e.user.Store(&user.DefaultInfo{Name: "bob"})
		defer e.user.Store(alice())
		req := e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil)
		forge(req)
		readBody(t, e.do(req))
		seen := peer.requests()
		s := seen[len(seen)-1]
		if got, want := remoteHeaders(s.Header), (http.Header{"X-Remote-User": {"bob"}}); !reflect.DeepEqual(got, want) {
			t.Fatalf("peer saw %v, want %v", got, want)
		}
		if s.User == nil || s.User.GetName() != "bob" || s.User.GetUID() != "" || len(s.User.GetGroups()) != 0 || len(s.User.GetExtra()) != 0 {
			t.Fatalf("peer authenticated %#v", s.User)
		}
	})
}

func TestProxyWithoutUserIsAnError(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	req := httptest.NewRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil)
	info, _ := routing.RequestInfoFactory.NewRequestInfo(req)
	req = req.WithContext(apirequest.WithRequestInfo(req.Context(), info))
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || len(peer.requests()) != 0 {
		t.Fatalf("code %d, peer requests %d: an anonymous context must never be proxied", rec.Code, len(peer.requests()))
	}
}

func TestProxyTriesTheNextCandidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(e *env) string // the endpoint of the first candidate
	}{
		{"connection refused", func(e *env) string { return closedEndpoint(t) }},
		{"serving certificate not signed by the peer CA", func(e *env) string {
			// The handshake fails before anything is sent.
			_, _, rogue := testpki.NewCA(t, "rogue-ca").Issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, []string{peerServerName}, nil)
			p := newTestPeer(t, e.pki, rogue, nil)
			return p.endpoint()
		}},
		{"not a TLS server", func(e *env) string {
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t.Error("plain HTTP server reached")
			}))
			t.Cleanup(s.Close)
			return s.Listener.Addr().String()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			second := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "created by the second")
			})
			ids := order("p1", "p2")
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer(ids[0], tc.first(e)), readyPeer(ids[1], second.endpoint())))
			body := strings.Repeat(`{"spec":"a POST body that must reach the second candidate intact"}`, 500)
			resp := e.do(e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets?fieldManager=x", strings.NewReader(body)))
			got := readBody(t, resp)
			if resp.StatusCode != http.StatusCreated || got != "created by the second" {
				t.Fatalf("%d %q", resp.StatusCode, got)
			}
			seen := second.requests()
			if len(seen) != 1 || seen[0].Method != http.MethodPost || seen[0].Body != body || seen[0].RawQuery != "fieldManager=x" {
				t.Fatalf("second candidate saw %d requests: %+v", len(seen), seen)
			}
			checkProxiedAsAlice(t, seen[0])
		})
	}
}

func TestProxyEveryCandidateRefuses(t *testing.T) {
	e := newEnv(t)
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("p1", closedEndpoint(t)), readyPeer("p2", closedEndpoint(t)), readyPeer("p3", closedEndpoint(t))))
	resetUpstreamMetrics()
	resp := e.do(e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets", strings.NewReader(`{}`)))
	checkUnavailable(t, resp, readBody(t, resp), "no peer serving it could be reached")
	if e.local.calls.Load() != 0 {
		t.Fatal("local chain called")
	}
	for typ, want := range map[string]float64{"connect": 3, "unavailable": 1} {
		if v := counterValue(t, "apiserver_peer_proxy_errors_total", map[string]string{"type": typ, "group": "example.com", "version": "v1", "resource": "widgets"}); v != want {
			t.Errorf("apiserver_peer_proxy_errors_total{type=%s} = %v, want %v", typ, v, want)
		}
	}
}

// TestProxyAfterThePeerSawTheRequest: once a peer may have seen a request
// that changes something, it is never sent to another peer, and the answer
// (502, no Retry-After) invites no client to send it again; a read whose
// response has not started is safe to repeat on the next candidate.
func TestProxyAfterThePeerSawTheRequest(t *testing.T) {
	for _, tc := range []struct {
		method   string
		body     string
		repeated bool
	}{
		{http.MethodPost, `{"kind":"Widget"}`, false},
		{http.MethodPut, `{"kind":"Widget"}`, false},
		{http.MethodDelete, "", false},
		{http.MethodPatch, `{"spec":{}}`, false},
		{http.MethodGet, "", true},
	} {
		t.Run(tc.method, func(t *testing.T) {
			e := newEnv(t)
			failing := e.newPeer(func(http.ResponseWriter, *http.Request) {
				// The request was read; drop the stream without answering.
				panic(http.ErrAbortHandler)
			})
			other := e.newPeer(nil)
			ids := order("p1", "p2")
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer(ids[0], failing.endpoint()), readyPeer(ids[1], other.endpoint())))
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			resp := e.do(e.newRequest(tc.method, "/apis/example.com/v1/namespaces/ns1/widgets/w1", body))
			got := readBody(t, resp)
			if n := len(failing.requests()); n != 1 {
				t.Fatalf("failing peer got %d requests", n)
			}
			if failing.requests()[0].Body != tc.body {
				t.Fatalf("failing peer read %q", failing.requests()[0].Body)
			}
			if !tc.repeated {
				checkSentButFailed(t, resp, got, http.StatusBadGateway, ids[0])
				if n := len(other.requests()); n != 0 {
					t.Fatalf("the request was replayed to another peer (%d times)", n)
				}
				return
			}
			if resp.StatusCode != http.StatusOK || got != `{"kind":"Widget"}` || len(other.requests()) != 1 {
				t.Fatalf("safe read not repeated on the next peer: %d %q, %d requests", resp.StatusCode, got, len(other.requests()))
			}
			checkProxiedAsAlice(t, other.requests()[0])
		})
	}
}

// checkSentButFailed checks the answer to a write that reached a peer which
// then failed: code, a Status naming the resource and the peer, no network
// detail, and no Retry-After (client-go retries any 5xx that has one).
func checkSentButFailed(t *testing.T, resp *http.Response, body string, code int, peerID string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, code, body)
	}
	if ra, ok := resp.Header["Retry-After"]; ok {
		t.Fatalf("Retry-After %q on a write the peer may have carried out", ra)
	}
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, body)
	}
	if st.Kind != "Status" || int(st.Code) != code || st.Details == nil || st.Details.RetryAfterSeconds != 0 {
		t.Errorf("unexpected Status: %s", body)
	}
	for _, want := range []string{"widgets.example.com", "peer kube-apiserver " + peerID, "not retried"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message %q does not name %q", st.Message, want)
		}
	}
	for _, leak := range []string{"127.0.0.1", "stream", "INTERNAL_ERROR", "dial", "tcp"} {
		if strings.Contains(st.Message, leak) {
			t.Errorf("message %q carries a network detail (%q)", st.Message, leak)
		}
	}
}

// TestProxyRejectsRedirects: a peer's redirect is never followed or relayed.
func TestProxyRejectsRedirects(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil))
	readBody(t, resp)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
		t.Fatalf("status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestProxyStreamsWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOption
	}{{"front HTTP/1.1", nil}, {"front HTTP/2", []envOption{frontHTTP2}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			release := make(chan struct{})
			events := []string{
				`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"11"}}}`,
				`{"type":"MODIFIED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"12"}}}`,
				`{"type":"DELETED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"13"}}}`,
			}
			peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Transfer-Encoding", "chunked")
				w.WriteHeader(http.StatusOK)
				flusher := w.(http.Flusher)
				_, _ = io.WriteString(w, events[0]+"\n")
				flusher.Flush()
				// The rest only once the client has the first event.
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				for _, ev := range events[1:] {
					_, _ = io.WriteString(w, ev+"\n")
					flusher.Flush()
				}
			})
			var once bool
			releaseOnce := func() {
				if !once {
					once = true
					close(release)
				}
			}
			t.Cleanup(releaseOnce) // runs before the peer is closed
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))

			resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets?watch=true&resourceVersion=10&allowWatchBookmarks=true", nil))
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %v", resp.StatusCode, resp.Header)
			}
			dec := json.NewDecoder(resp.Body)
			var got []string
			next := func() {
				var ev json.RawMessage
				if err := dec.Decode(&ev); err != nil {
					t.Fatalf("after %d events: %v", len(got), err)
				}
				got = append(got, string(ev))
			}
			// If the proxy buffered, this would wait for the peer, which
			// waits for us.
			next()
			releaseOnce()
			next()
			next()
			if !reflect.DeepEqual(got, events) {
				t.Fatalf("events %v\nwant %v", got, events)
			}
			if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
				t.Fatalf("after the last event: %v, want EOF", err)
			}
			s := peer.requests()[0]
			if s.RawQuery != "watch=true&resourceVersion=10&allowWatchBookmarks=true" {
				t.Fatalf("query %q", s.RawQuery)
			}
			checkProxiedAsAlice(t, s)
		})
	}
}

// TestProxyUpgradeCarriesIdentity: exec, attach and port-forward are
// upgrades; they must reach the peer with the user's identity (upstream
// loses it) and stream both ways.
func TestProxyUpgradeCarriesIdentity(t *testing.T) {
	for _, firstRefuses := range []bool{false, true} {
		t.Run(fmt.Sprintf("first candidate refuses=%v", firstRefuses), func(t *testing.T) {
			e := newEnv(t)
			peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				conn, brw, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
				_ = brw.Flush()
				line, err := brw.ReadString('\n')
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = brw.WriteString("echo: " + line)
				_ = brw.Flush()
			})
			e.setLocal()
			if firstRefuses {
				ids := order("p1", "p2")
				e.setRoutes(route(podsGVR, readyPeer(ids[0], closedEndpoint(t)), readyPeer(ids[1], peer.endpoint())))
			} else {
				e.setRoutes(route(podsGVR, readyPeer("b", peer.endpoint())))
			}

			conn, err := net.Dial("tcp", e.front.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			const path = "/api/v1/namespaces/ns1/pods/p1/exec?command=sh&stdin=true&stdout=true"
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"+
				"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Remote-User: mallory\r\nX-Remote-Group: system:masters\r\n\r\n", path)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "SPDY/3.1" {
				t.Fatalf("upgrade answered %d %v", resp.StatusCode, resp.Header)
			}
			if _, err := io.WriteString(conn, "ping\n"); err != nil {
				t.Fatal(err)
			}
			line, err := br.ReadString('\n')
			if err != nil || line != "echo: ping\n" {
				t.Fatalf("stream: %q, %v", line, err)
			}
			seen := peer.requests()
			if len(seen) != 1 {
				t.Fatalf("peer got %d requests", len(seen))
			}
			s := seen[0]
			if s.Method != http.MethodPost || s.Path+"?"+s.RawQuery != path || s.Header.Get("Upgrade") != "SPDY/3.1" ||
				s.Header.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
				t.Fatalf("peer saw %s %s?%s %v", s.Method, s.Path, s.RawQuery, s.Header)
			}
			checkProxiedAsAlice(t, s)
		})
	}
}

// nopWriter is a ResponseWriter that keeps nothing.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// localRequest is a request for a locally served GVR, as the outer filters
// hand it to the filter.
func localRequest(t testing.TB) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns1/pods/p1", nil)
	info, err := routing.RequestInfoFactory.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	return req.WithContext(apirequest.WithUser(apirequest.WithRequestInfo(req.Context(), info), alice()))
}

func TestLocalPathDoesNotAllocate(t *testing.T) {
	e := newEnv(t)
	// pods is served here, though peers serve it too.
	e.setRoutes(route(podsGVR, readyPeer("b", "b:1"), readyPeer(selfID, "self:1")))
	var calls int
	h := e.f.WrapHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusOK)
	}), &genericapiserver.Config{APIServerID: selfID, Serializer: testSerializer})
	req, w := localRequest(t), &nopWriter{h: http.Header{}}
	allocs := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) })
	if calls == 0 {
		t.Fatal("next handler not called")
	}
	if allocs != 0 {
		t.Fatalf("the local path allocates %v times per request, want 0", allocs)
	}
}
