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
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/internal/testrelay"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// hangingPeer takes requests and never answers until the filter gives up
// on them; received gets one value per request.
func hangingPeer(e *env, received chan<- string) *testPeer {
	return e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		received <- r.Method
		<-r.Context().Done()
	})
}

// setView installs routes and the APIServerPeers that say who is ready, as
// the informers would.
func (e *env) setView(tables []*v1alpha1.PeerRoutingTable, peers ...*v1alpha1.APIServerPeer) {
	e.f.views.Routes.SetTable(routing.NewTable(tables, peers))
}

// markNotReady is what the routing state does when an APIServerPeer turns
// not ready: the new table first, then the peer is stopped.
func (e *env) markNotReady(id string, tables []*v1alpha1.PeerRoutingTable, peers ...*v1alpha1.APIServerPeer) {
	e.setView(tables, peers...)
	e.f.peerStopped(id)
}

// TestStoppedPeerEndsRequestsInFlight: requests in flight to a peer that
// the view marks not ready end at once, not at the response header timeout:
// a read goes on to the next candidate, a write gets 504 and is sent to no
// other peer, a watch's stream ends cleanly.
func TestStoppedPeerEndsRequestsInFlight(t *testing.T) {
	const headerTimeout = 10 * time.Minute // far beyond any answer here
	for _, tc := range []struct {
		name, method string
		wantCode     int
		failsOver    bool
	}{
		{"read fails over", http.MethodGet, http.StatusOK, true},
		{"write gets 504", http.MethodPost, http.StatusGatewayTimeout, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, peerHeaderTimeout(headerTimeout))
			received := make(chan string, 4)
			hung := hangingPeer(e, received)
			other := e.newPeer(nil)
			ids := order("p1", "p2")
			e.setLocal()
			tables := []*v1alpha1.PeerRoutingTable{route(widgetsGVR, readyPeer(ids[0], hung.endpoint()), readyPeer(ids[1], other.endpoint()))}
			e.setView(tables, peerWithReady(ids[0], hung.endpoint(), metav1.ConditionTrue, "1"), peerWithReady(ids[1], other.endpoint(), metav1.ConditionTrue, "1"))

			type answer struct {
				code   int
				header http.Header
				body   string
			}
			done := make(chan answer, 1)
			go func() {
				var body io.Reader
				if tc.method == http.MethodPost {
					body = strings.NewReader(`{"kind":"Widget"}`)
				}
				resp := e.do(e.newRequest(tc.method, "/apis/example.com/v1/namespaces/ns1/widgets", body))
				done <- answer{resp.StatusCode, resp.Header, readBody(t, resp)}
			}()
			if m := <-received; m != tc.method {
				t.Fatalf("the first candidate got %s", m)
			}
			start := time.Now()
			e.markNotReady(ids[0], tables, peerWithReady(ids[0], hung.endpoint(), metav1.ConditionFalse, "2"), peerWithReady(ids[1], other.endpoint(), metav1.ConditionTrue, "1"))
			var a answer
			select {
			case a = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the request still waits on the stopped peer")
			}
			t.Logf("answered %d %v after the stop", a.code, time.Since(start).Round(time.Millisecond))
			if a.code != tc.wantCode {
				t.Fatalf("%d %s, want %d", a.code, a.body, tc.wantCode)
			}
			if n := len(other.requests()); (n == 1) != tc.failsOver || n > 1 {
				t.Errorf("the other candidate saw %d requests", n)
			}
			if !tc.failsOver {
				var st metav1.Status
				if err := json.Unmarshal([]byte(a.body), &st); err != nil || st.Reason != metav1.StatusReasonTimeout || !strings.Contains(st.Message, "not retried") {
					t.Errorf("504 body: %v %s", err, a.body)
				}
				if ra := a.header.Get("Retry-After"); ra != "" {
					t.Errorf("a write's 504 invites a retry: Retry-After %s", ra)
				}
			}
		})
	}

	t.Run("watch ends cleanly", func(t *testing.T) {
		e := newEnv(t, peerHeaderTimeout(headerTimeout))
		started := make(chan struct{})
		streaming := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"Widget"}}`+"\n")
			w.(http.Flusher).Flush()
			close(started)
			<-r.Context().Done()
		})
		e.setLocal()
		tables := []*v1alpha1.PeerRoutingTable{route(widgetsGVR, readyPeer("p1", streaming.endpoint()))}
		e.setView(tables, peerWithReady("p1", streaming.endpoint(), metav1.ConditionTrue, "1"))
		resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets?watch=true", nil))
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watch: %d", resp.StatusCode)
		}
		rd := bufio.NewReader(resp.Body)
		if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, "ADDED") {
			t.Fatalf("first event: %q %v", line, err)
		}
		<-started
		e.markNotReady("p1", tables, peerWithReady("p1", streaming.endpoint(), metav1.ConditionFalse, "2"))
		rest := make(chan error, 1)
		go func() { _, err := io.ReadAll(rd); rest <- err }()
		select {
		case err := <-rest:
			if err != nil {
				t.Errorf("the stream was cut (%v), not ended cleanly", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the watch still streams from the stopped peer")
		}
	})
}

// TestDepartedPeerFinishesRequestsInFlight: a write in flight to a peer
// that the view marks not ready because it departed gracefully (SIGTERM: its
// Lease records the departure) runs to completion, as the leaving server
// finishes it during its own shutdown; only a peer that stopped answering
// has its requests ended. CI's upgrade drill caught the old behaviour: an
// update proxied to a server at the moment of its SIGTERM got 504.
func TestDepartedPeerFinishesRequestsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lease is what this server's Lease watch shows when the view stops
		// the peer; later, what it shows after it (nil: nothing changes).
		lease, later func(id, endpoint string) *coordinationv1.Lease
		wantCode     int
	}{
		{"departure seen first", departedLease, nil, http.StatusCreated},
		{"departure seen within the grace", liveLease, departedLease, http.StatusCreated},
		{"lease lapsed: stopped answering", lapsedLease, nil, http.StatusGatewayTimeout},
		{"lease live, no departure: stopped after the grace", liveLease, nil, http.StatusGatewayTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, peerHeaderTimeout(10*time.Minute))
			received := make(chan string, 4)
			release := make(chan struct{})
			// Answers once released, or ends with the filter's attempt.
			leaving := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				received <- r.Method
				select {
				case <-release:
					w.WriteHeader(http.StatusCreated)
				case <-r.Context().Done():
				}
			})
			e.setLocal()
			tables := []*v1alpha1.PeerRoutingTable{route(widgetsGVR, readyPeer("p1", leaving.endpoint()))}
			e.setView(tables, peerWithReady("p1", leaving.endpoint(), metav1.ConditionTrue, "1"))
			done := make(chan *http.Response, 1)
			go func() {
				done <- e.do(e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets", strings.NewReader(`{"kind":"Widget"}`)))
			}()
			<-received
			e.f.views.Leases.Record(klog.Background(), tc.lease("p1", leaving.endpoint()))
			start := time.Now()
			e.markNotReady("p1", tables, peerWithReady("p1", leaving.endpoint(), metav1.ConditionFalse, "2"))
			if tc.later != nil {
				time.Sleep(departureNoticeGrace / 4)
				e.f.views.Leases.Record(klog.Background(), tc.later("p1", leaving.endpoint()))
			}
			if tc.wantCode == http.StatusCreated {
				// Past the grace: a stop would have ended the attempt.
				time.Sleep(departureNoticeGrace + time.Second)
				close(release)
			}
			var resp *http.Response
			select {
			case resp = <-done:
			case <-time.After(time.Minute):
				t.Fatal("no answer")
			}
			body := readBody(t, resp)
			t.Logf("answered %d after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tc.wantCode)
			}
		})
	}
}

func liveLease(id, endpoint string) *coordinationv1.Lease {
	return peerlease.NewRegistrationLease(nil, id, endpoint, "v1.37.2", "", time.Now())
}

func departedLease(id, endpoint string) *coordinationv1.Lease {
	return peerlease.MarkDeparted(liveLease(id, endpoint), time.Now(), "")
}

func lapsedLease(id, endpoint string) *coordinationv1.Lease {
	return peerlease.NewRegistrationLease(nil, id, endpoint, "v1.37.2", "", time.Now().Add(-time.Minute))
}

// justLapsedLease lapsed 2 s ago: within routing.RecoveryWindow.
func justLapsedLease(id, endpoint string) *coordinationv1.Lease {
	return peerlease.NewRegistrationLease(nil, id, endpoint, "v1.37.2", "", time.Now().Add(-(peerlease.DefaultDurationSeconds+2)*time.Second))
}

// TestPeerConnectionHealthCheck: a peer that goes silent while a write is
// in flight (frozen, cut off) fails its connection's HTTP/2 health check,
// and the write gets 504 (it was sent; never resent), not the response
// header timeout. The check's timing is Options.PeerHTTP2 (1 s + 1 s here
// for speed; the peers' defaults are 5 s + 3 s).
func TestPeerConnectionHealthCheck(t *testing.T) {
	e := newEnv(t, peerHeaderTimeout(10*time.Minute), peerHTTP2(PeerHTTP2{ReadIdleTimeout: time.Second, PingTimeout: time.Second}))
	received := make(chan string, 4)
	peer := hangingPeer(e, received)
	relay := testrelay.New(t, peer.endpoint())
	other := e.newPeer(nil)
	ids := order("p1", "p2")
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer(ids[0], relay.Addr()), readyPeer(ids[1], other.endpoint())))
	done := make(chan *http.Response, 1)
	go func() {
		done <- e.do(e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets", strings.NewReader(`{}`)))
	}()
	<-received
	relay.Freeze()
	select {
	case resp := <-done:
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("%d (Retry-After %q) %s, want 504 without Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	case <-time.After(time.Minute):
		t.Fatal("the write still waits on a silent peer")
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("the write was sent again, to the other candidate (%d)", n)
	}
}

func TestPeerHealthCheckDefaults(t *testing.T) {
	if got := envSeconds("PEERDISCOVERY_TEST_UNSET_VARIABLE", DefaultPeerHTTP2.ReadIdleTimeout); got != 5*time.Second {
		t.Errorf("read idle default %v", got)
	}
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "not-a-number")
	if got := PeerHTTP2FromEnvironment().PingTimeout; got != 3*time.Second {
		t.Errorf("ping default on a bad value %v", got)
	}
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "7")
	if got := PeerHTTP2FromEnvironment().PingTimeout; got != 7*time.Second {
		t.Errorf("ping from the environment %v", got)
	}
}
