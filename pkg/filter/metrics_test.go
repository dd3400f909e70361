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
	"io"
	"net/http"
	"strings"
	"testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// TestPeerRoutedRequestsCounted: every request routed to peers counts once,
// under the status code its client got: the peer's answer, 503 when no
// peer could take it, 502 when the peer failed after a write was sent. A
// request served here does not count.
func TestPeerRoutedRequestsCounted(t *testing.T) {
	e := newEnv(t)
	answering := e.newPeer(nil)
	breaking := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler) // the connection closes before an answer
	})
	e.setLocal(podsGVR)
	const metric = "peerdiscovery_filter_peer_routed_requests_total"
	count := func(code string) float64 { return counterValue(t, metric, map[string]string{"code": code}) }
	for _, c := range []struct {
		name, method, path string
		tables             []*v1alpha1.PeerRoutingTable
		notReady           []string
		wantCode           int
		counted            string
	}{
		{"proxied", http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", []*v1alpha1.PeerRoutingTable{route(widgetsGVR, readyPeer("p1", answering.endpoint()))}, nil, http.StatusOK, "200"},
		{"no ready peer", http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", []*v1alpha1.PeerRoutingTable{route(widgetsGVR, readyPeer("p1", answering.endpoint()))}, []string{"p1"}, http.StatusServiceUnavailable, "503"},
		{"the peer failed after a write was sent", http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets", []*v1alpha1.PeerRoutingTable{route(widgetsGVR, readyPeer("p1", breaking.endpoint()))}, nil, http.StatusBadGateway, "502"},
		{"served here (the test chain answers 404)", http.MethodGet, "/api/v1/namespaces/ns1/pods", nil, nil, http.StatusNotFound, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.setView(c.tables, apiServerPeers(c.tables, c.notReady...)...)
			before := map[string]float64{}
			for _, code := range []string{"200", "502", "503"} {
				before[code] = count(code)
			}
			var body io.Reader
			if c.method == http.MethodPost {
				body = strings.NewReader(`{"kind":"Widget"}`)
			}
			resp := e.do(e.newRequest(c.method, c.path, body))
			got := readBody(t, resp)
			if resp.StatusCode != c.wantCode {
				t.Fatalf("%d %s, want %d", resp.StatusCode, got, c.wantCode)
			}
			for code, was := range before {
				want := was
				if code == c.counted {
					want++
				}
				if now := count(code); now != want {
					t.Errorf("code %s: %v, want %v", code, now, want)
				}
			}
		})
	}
}
