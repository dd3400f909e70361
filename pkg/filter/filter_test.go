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
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

func TestHandlerDecisions(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	ep := peer.endpoint()
	tables := []*v1alpha1.PeerRoutingTable{
		route(podsGVR, readyPeer(selfID, "self:1"), readyPeer("b", ep)),
		route(widgetsGVR, readyPeer(selfID, "self:1"), readyPeer("b", ep)),
		route(crdGVR, readyPeer("b", ep)),
		route(schemaGVR("example.com", "v1", "selfish"), readyPeer(selfID, "self:1")),
		route(schemaGVR("example.com", "v1", "sleepy"), v1alpha1.RoutingPeer{ServerID: "c", Endpoint: ep}),
		route(schemaGVR("example.com", "v1", "departed"), v1alpha1.RoutingPeer{ServerID: "d", Endpoint: ep, Left: true}),
	}
	tables[2].Status.ClusterWide, tables[2].Status.ClusterWideSource = true, "CustomResourceDefinition"
	e.f.views.Routes.SetTable(routing.NewTable(tables, apiServerPeers(tables, "c")))

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
			e.f.views.Routes.SetSynced(!tc.unsynced)
			defer e.f.views.Routes.SetSynced(true)
			if tc.inGrace {
				e.f.setSyncDeadline(timePtr(time.Now().Add(time.Hour)))
				defer e.f.setSyncDeadline(nil)
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
				// None ready or only left: nothing says when it will
				// answer, so no Retry-After; not synced: soon.
				msg, retryAfter := "none is ready", 0
				if tc.unsynced {
					msg, retryAfter = "not synced yet", 1
					if d := counterValue(t, "apiserver_peer_proxy_errors_total", unsyncedLabels) - unsyncedBefore; d != 1 {
						t.Fatalf("apiserver_peer_proxy_errors_total{type=unsynced,resource=other} grew by %v, want 1", d)
					}
					if v := counterValue(t, "apiserver_peer_proxy_errors_total", clientLabels); v != 0 {
						t.Fatalf("apiserver_peer_proxy_errors_total has a series for the client's GVR: %v", v)
					}
				}
				checkUnavailable(t, resp, body, msg, retryAfter)
			}
		})
	}
}

// checkUnavailable checks a 503 with a Status body and Retry-After:
// retryAfter seconds, or none at 0.
func checkUnavailable(t *testing.T, resp *http.Response, body, msg string, retryAfter int) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", resp.StatusCode, body)
	}
	want := ""
	if retryAfter > 0 {
		want = strconv.Itoa(retryAfter)
	}
	if got := resp.Header.Get("Retry-After"); got != want {
		t.Errorf("Retry-After = %q, want %q", got, want)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q", ct)
	}
	var st metav1.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, body)
	}
	if st.Kind != "Status" || st.Status != metav1.StatusFailure || st.Code != http.StatusServiceUnavailable ||
		st.Reason != metav1.StatusReasonServiceUnavailable || st.Details == nil || st.Details.RetryAfterSeconds != int32(retryAfter) {
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
