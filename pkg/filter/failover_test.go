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
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	testpki "sigs.k8s.io/peerdiscovery/test/pki"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

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
	// Nothing listens where any of them was: not back within seconds, so
	// no Retry-After (routing.RecoveryWindow).
	checkUnavailable(t, resp, readBody(t, resp), "no peer serving it accepts connections, so none is expected back within seconds", 0)
	if e.local.calls.Load() != 0 {
		t.Fatal("local chain called")
	}
	for typ, want := range map[string]float64{"connect": 3, "unavailable": 1} {
		if v := counterValue(t, "apiserver_peer_proxy_errors_total", map[string]string{"type": typ, "group": "example.com", "version": "v1", "resource": "widgets"}); v != want {
			t.Errorf("apiserver_peer_proxy_errors_total{type=%s} = %v, want %v", typ, v, want)
		}
	}
}

// TestProxyEveryCandidateRefusesWhileTheViewLags: the view still lists
// the candidates ready (its replicas restarting, say) but none can be
// connected to. When the Lease of each records a departure or lapsed over
// routing.RecoveryWindow ago, nothing says when one will be back: 503
// without Retry-After, as for a decision of none ready. While one's Lease
// is live, or lapsed only seconds ago, Retry-After 1 when its connection
// was cut (a pause, a partition); none when every connection was refused
// (nothing listens there: crashed or killed).
func TestProxyEveryCandidateRefusesWhileTheViewLags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		p2         func(id, endpoint string) *coordinationv1.Lease
		cut        bool // p2 accepts and cuts the connection; else it refuses
		msg        string
		retryAfter int
	}{
		{"every lease lapsed or departed", departedLease, false, "registration lease of each records its departure or lapsed over " + routing.RecoveryWindow.String() + " ago", 0},
		{"one lease live, refused", liveLease, false, "none is expected back within seconds", 0},
		{"one lease lapsed seconds ago, refused", justLapsedLease, false, "none is expected back within seconds", 0},
		{"one lease live, cut", liveLease, true, "no peer serving it could be reached (tried", 1},
		{"one lease lapsed seconds ago, cut", justLapsedLease, true, "no peer serving it could be reached (tried", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.setLocal()
			p1, p2 := closedEndpoint(t), closedEndpoint(t)
			if tc.cut {
				p2 = cutEndpoint(t)
			}
			e.setRoutes(route(widgetsGVR, readyPeer("p1", p1), readyPeer("p2", p2)))
			e.f.views.Leases.Record(klog.Background(), lapsedLease("p1", p1))
			e.f.views.Leases.Record(klog.Background(), tc.p2("p2", p2))
			resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
			checkUnavailable(t, resp, readBody(t, resp), tc.msg, tc.retryAfter)
		})
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

// TestProxyReadCutMidAnswer: a peer that dies after it started to answer a
// read (a SIGKILL in the middle of a list) costs the client nothing while
// the answer is within the read-ahead: the read is repeated on the next
// candidate. A longer answer has started to stream and is cut.
func TestProxyReadCutMidAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sent     int // bytes the dying peer sends before it dies
		repeated bool
	}{
		{"within the read-ahead", 100, true},
		{"beyond the read-ahead", 2 * proxy.MaxReadAheadBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			dying := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, `{"kind":"WidgetList","items":[`+strings.Repeat(" ", tc.sent))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			})
			other := e.newPeer(nil)
			ids := order("p1", "p2")
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer(ids[0], dying.endpoint()), readyPeer(ids[1], other.endpoint())))
			resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
			got, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if !tc.repeated {
				if err == nil || len(other.requests()) != 0 {
					t.Fatalf("a streamed answer was not cut (err %v) or was repeated (%d)", err, len(other.requests()))
				}
				return
			}
			if err != nil || resp.StatusCode != http.StatusOK || string(got) != `{"kind":"Widget"}` || len(other.requests()) != 1 {
				t.Fatalf("read not repeated on the next peer: %d %q %v, %d requests", resp.StatusCode, got, err, len(other.requests()))
			}
		})
	}
}

// TestUnavailableNamesAWaitWhileAPeerMayRecover: a decision of none ready
// answers 503 with Retry-After 1 while a server that serves the resource
// stopped less than routing.RecoveryWindow ago without shutting down (a
// crash its kubelet restarts, a pause), and without one when it stopped
// longer ago or shut down.
func TestUnavailableNamesAWaitWhileAPeerMayRecover(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name       string
		reason     string
		left       bool
		since      time.Time
		retryAfter int
	}{
		{"scrape timed out 2s ago", "Timeout", false, now.Add(-2 * time.Second), 1},
		{"lease lapsed 2s ago", v1alpha1.PeerReasonLeft, true, now.Add(-2 * time.Second), 1},
		{"lease lapsed a minute ago", v1alpha1.PeerReasonLeft, true, now.Add(-time.Minute), 0},
		{"shut down 2s ago", v1alpha1.PeerReasonShutDown, true, now.Add(-2 * time.Second), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.setLocal()
			tables := []*v1alpha1.PeerRoutingTable{route(widgetsGVR, v1alpha1.RoutingPeer{ServerID: "p1", Endpoint: closedEndpoint(t), Left: tc.left})}
			peers := apiServerPeers(tables, "p1")
			peers[0].Status.Conditions[0].Reason = tc.reason
			peers[0].Status.Conditions[0].LastTransitionTime = metav1.NewTime(tc.since)
			e.f.views.Routes.SetTable(routing.NewTable(tables, peers))
			resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil))
			body := readBody(t, resp)
			checkUnavailable(t, resp, body, "none is ready", tc.retryAfter)
			if said := strings.Contains(body, routing.RecoveringNote); said != (tc.retryAfter > 0) {
				t.Errorf("the message says the peer may be back soon: %v, want %v: %s", said, tc.retryAfter > 0, body)
			}
		})
	}
}
