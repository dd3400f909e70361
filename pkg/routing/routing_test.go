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

package routing

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

const self = "apiserver-self"

var (
	pods      = gvr("", "v1", "pods")
	widgets   = gvr("example.com", "v1", "widgets")
	gadgets   = gvr("example.com", "v1beta1", "gadgets")
	crds      = gvr("crd.example.com", "v1", "things")
	aggr      = gvr("metrics.k8s.io", "v1beta1", "nodes")
	unknown   = gvr("nowhere.example.com", "v1", "ghosts")
	onlySelf  = gvr("example.com", "v1", "selfish")
	noneReady = gvr("example.com", "v1", "sleepy")
	onlyLeft  = gvr("example.com", "v1", "departed")
	noPeers   = gvr("example.com", "v1", "empty")
)

// testTable has one route for every branch of Decide.
func testTable() *Table {
	return newTable(
		rt(pods, servedByAll, withPeers(ready(self), ready("a"), ready("b"))),
		// widgets: self listed (it does not serve it now), one ready peer,
		// one not ready, one left.
		rt(widgets, withPeers(ready(self), ready("b"), notReady("c"), left("d"))),
		rt(gadgets, withPeers(ready("a"), ready("b"), ready("h"), ready("e"), notReady("f"), left("g"))),
		rt(crds, clusterWide("CustomResourceDefinition"), withPeers(ready("a"))),
		rt(aggr, clusterWide("APIService")),
		rt(onlySelf, withPeers(ready(self))),
		rt(noneReady, withPeers(ready(self), notReady("i"), notReady("j"), left("k"))),
		rt(onlyLeft, withPeers(left("l"), left("m"))),
		rt(noPeers),
	)
}

func TestDecide(t *testing.T) {
	table := testTable()
	local := localSet{pods: true}
	cases := []struct {
		name       string
		req        Request
		want       v1alpha1.RouteDecision
		why        why
		candidates []string
		hasRoute   bool
		reason     []string // substrings of Reason()
	}{{
		name:   "non-resource request",
		req:    Request{IsResourceRequest: false, GVR: widgets},
		want:   v1alpha1.RouteLocal,
		why:    whyNonResource,
		reason: []string{"not a resource request"},
	}, {
		name:   "already proxied by a peer, even for a proxied GVR",
		req:    Request{IsResourceRequest: true, GVR: widgets, AlreadyProxied: true},
		want:   v1alpha1.RouteLocal,
		why:    whyProxied,
		reason: []string{"already proxied"},
	}, {
		name:   "already proxied, unknown GVR",
		req:    Request{IsResourceRequest: true, GVR: unknown, AlreadyProxied: true},
		want:   v1alpha1.RouteLocal,
		why:    whyProxied,
		reason: []string{"never proxied twice"},
	}, {
		name:   "served locally",
		req:    Request{IsResourceRequest: true, GVR: pods},
		want:   v1alpha1.RouteLocal,
		why:    whyLocal,
		reason: []string{"v1/pods is served by this server"},
	}, {
		name:     "cluster-wide CRD, not in the local discovery yet",
		req:      Request{IsResourceRequest: true, GVR: crds},
		want:     v1alpha1.RouteLocal,
		why:      whyClusterWide,
		hasRoute: true,
		reason:   []string{"crd.example.com/v1/things", "cluster-wide", "CustomResourceDefinition", "never proxied"},
	}, {
		name:     "cluster-wide APIService",
		req:      Request{IsResourceRequest: true, GVR: aggr},
		want:     v1alpha1.RouteLocal,
		why:      whyClusterWide,
		hasRoute: true,
		reason:   []string{"APIService"},
	}, {
		name:       "one ready peer; self, not-ready and left peers excluded",
		req:        Request{IsResourceRequest: true, GVR: widgets},
		want:       v1alpha1.RouteProxy,
		why:        whyProxy,
		candidates: []string{"b"},
		hasRoute:   true,
		reason:     []string{"example.com/v1/widgets is not served here", "proxy to b"},
	}, {
		name:       "several ready peers, in the source's order",
		req:        Request{IsResourceRequest: true, GVR: gadgets},
		want:       v1alpha1.RouteProxy,
		why:        whyProxy,
		candidates: expectedOrder(self, []string{"a", "b", "h", "e"}),
		hasRoute:   true,
		reason:     []string{"ready peers, in order: " + strings.Join(expectedOrder(self, []string{"a", "b", "h", "e"}), ", ")},
	}, {
		name:     "peers known but none ready",
		req:      Request{IsResourceRequest: true, GVR: noneReady},
		want:     v1alpha1.RouteUnavailable,
		why:      whyNoneReady,
		hasRoute: true,
		reason:   []string{"served by i, j, k but none is ready"},
	}, {
		name:     "only left (tombstoned) peers",
		req:      Request{IsResourceRequest: true, GVR: onlyLeft},
		want:     v1alpha1.RouteUnavailable,
		why:      whyNoneReady,
		hasRoute: true,
		reason:   []string{"served by l, m but none is ready"},
	}, {
		name:     "only this server listed",
		req:      Request{IsResourceRequest: true, GVR: onlySelf},
		want:     v1alpha1.RouteNotFound,
		why:      whyOnlySelf,
		hasRoute: true,
		reason:   []string{"listed only for this server"},
	}, {
		name:     "route without peers",
		req:      Request{IsResourceRequest: true, GVR: noPeers},
		want:     v1alpha1.RouteNotFound,
		why:      whyOnlySelf,
		hasRoute: true,
	}, {
		name:   "unknown GVR",
		req:    Request{IsResourceRequest: true, GVR: unknown},
		want:   v1alpha1.RouteNotFound,
		why:    whyUnknown,
		reason: []string{"no peer serves nowhere.example.com/v1/ghosts"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := decide(table, tc.req, self, local)
			if res.Decision != tc.want || res.why != tc.why {
				t.Fatalf("Decide = %s (why %d), want %s (why %d); reason %q", res.Decision, res.why, tc.want, tc.why, res.Reason())
			}
			if got := ids(res.Candidates); !reflect.DeepEqual(got, tc.candidates) {
				t.Errorf("candidates = %v, want %v", got, tc.candidates)
			}
			for _, c := range res.Candidates {
				if c.ID == self || !c.Ready || c.Left {
					t.Errorf("candidate %+v must be a ready peer other than self", c)
				}
				if c.Endpoint != endpointOf(c.ID) {
					t.Errorf("candidate %s endpoint = %q", c.ID, c.Endpoint)
				}
			}
			if (res.Route != nil) != tc.hasRoute {
				t.Errorf("route = %v, want one: %v", res.Route, tc.hasRoute)
			}
			if res.Route != nil && res.Route.GVR != tc.req.GVR {
				t.Errorf("route GVR = %v, want %v", res.Route.GVR, tc.req.GVR)
			}
			if res.GVR != tc.req.GVR {
				t.Errorf("result GVR = %v, want %v", res.GVR, tc.req.GVR)
			}
			reason := res.Reason()
			if reason == "" {
				t.Fatal("empty reason")
			}
			for _, s := range tc.reason {
				if !strings.Contains(reason, s) {
					t.Errorf("reason %q does not contain %q", reason, s)
				}
			}
		})
	}
}

func TestDecideNilTableAndLocal(t *testing.T) {
	res := decide(nil, Request{IsResourceRequest: true, GVR: pods}, self, nil)
	if res.Decision != v1alpha1.RouteNotFound || res.Route != nil {
		t.Fatalf("nil table: %s, route %v", res.Decision, res.Route)
	}
	// No local view: the table decides alone.
	res = decide(testTable(), Request{IsResourceRequest: true, GVR: pods}, "x", nil)
	if res.Decision != v1alpha1.RouteProxy {
		t.Fatalf("nil local, peers serving: %s (%s)", res.Decision, res.Reason())
	}
	if got, want := ids(res.Candidates), expectedOrder("x", []string{self, "a", "b"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("candidates = %v, want %v", got, want)
	}
	if NewTable(nil, nil).Len() != 0 || (*Table)(nil).Len() != 0 || (*Table)(nil).Lookup(pods) != nil {
		t.Fatal("empty and nil tables must be empty")
	}
	if n := testTable().Len(); n != 9 {
		t.Fatalf("Len = %d, want 9", n)
	}
}

// TestLocalFunc checks the adapter.
func TestLocalFunc(t *testing.T) {
	var seen schema.GroupVersionResource
	l := LocalFunc(func(g schema.GroupVersionResource) bool { seen = g; return g == pods })
	if !l.Serves(pods) || seen != pods || l.Serves(widgets) {
		t.Fatal("LocalFunc does not delegate")
	}
}

func TestCandidateOrder(t *testing.T) {
	var peers []string
	for i := range 8 {
		peers = append(peers, fmt.Sprintf("apiserver-%c", 'a'+i))
	}
	table := func(order []string) *Table {
		var rps []testPeer
		for _, id := range order {
			rps = append(rps, ready(id))
		}
		return newTable(rt(widgets, withPeers(rps...)))
	}
	req := Request{IsResourceRequest: true, GVR: widgets}
	firsts := map[string]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for s := range 16 {
		src := fmt.Sprintf("source-%d", s)
		want := expectedOrder(src, peers)
		for range 5 {
			// The order of the table's list does not matter.
			shuffled := append([]string(nil), peers...)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			res := decide(table(shuffled), req, src, nil)
			if got := ids(res.Candidates); !reflect.DeepEqual(got, want) {
				t.Fatalf("source %s, table order %v: candidates %v, want %v", src, shuffled, got, want)
			}
		}
		firsts[want[0]] = true
	}
	// Different sources prefer different peers: the load spreads.
	if len(firsts) < 3 {
		t.Fatalf("16 sources prefer only %d distinct peers: %v", len(firsts), firsts)
	}
	// A source that is itself a peer never lists itself.
	res := decide(table(peers), req, peers[3], nil)
	want := expectedOrder(peers[3], append(append([]string(nil), peers[:3]...), peers[4:]...))
	if got := ids(res.Candidates); !reflect.DeepEqual(got, want) {
		t.Fatalf("self among peers: %v, want %v", got, want)
	}
	// The decision must not reorder the table's own route.
	if got := ids(table(peers).Lookup(widgets).Peers); !reflect.DeepEqual(got, peers) {
		t.Fatalf("route peers reordered: %v", got)
	}
	r := table(peers)
	decide(r, req, "source-1", nil)
	if got := ids(r.Lookup(widgets).Peers); !reflect.DeepEqual(got, peers) {
		t.Fatalf("Decide reordered the route: %v", got)
	}
}

// TestReasonTexts checks every reason is a sentence, also for Results
// built by hand.
func TestReasonTexts(t *testing.T) {
	route := &Route{GVR: widgets, Peers: []Peer{{ID: self}, {ID: "a"}}, ClusterWide: true, ClusterWideSource: "APIService"}
	for w := whyNonResource; w <= whyProxy; w++ {
		r := Result{GVR: widgets, self: self, why: w, Route: route, Candidates: []Peer{{ID: "a"}}}
		if s := r.Reason(); s == "" {
			t.Errorf("why %d: empty reason", w)
		}
	}
	r := Result{GVR: widgets, self: self, why: whyNoneReady, Route: route}
	if s := r.Reason(); strings.Contains(s, self) || !strings.Contains(s, "served by a but none is ready") {
		t.Errorf("none-ready reason must name the other peers only: %q", s)
	}
}

// TestDecideLocalPathDoesNotAllocate: the filter's common path costs no
// allocation.
func TestDecideLocalPathDoesNotAllocate(t *testing.T) {
	table := testTable()
	local := localSet{pods: true}
	for _, tc := range []struct {
		name string
		req  Request
		want v1alpha1.RouteDecision
	}{
		{"non-resource", Request{GVR: widgets}, v1alpha1.RouteLocal},
		{"already proxied", Request{IsResourceRequest: true, GVR: widgets, AlreadyProxied: true}, v1alpha1.RouteLocal},
		{"served locally", Request{IsResourceRequest: true, GVR: pods}, v1alpha1.RouteLocal},
		{"cluster-wide", Request{IsResourceRequest: true, GVR: crds}, v1alpha1.RouteLocal},
		{"unknown", Request{IsResourceRequest: true, GVR: unknown}, v1alpha1.RouteNotFound},
		{"none ready", Request{IsResourceRequest: true, GVR: noneReady}, v1alpha1.RouteUnavailable},
	} {
		var res Result
		allocs := testing.AllocsPerRun(1000, func() { res = decide(table, tc.req, self, local) })
		if res.Decision != tc.want {
			t.Fatalf("%s: %s, want %s", tc.name, res.Decision, tc.want)
		}
		if allocs != 0 {
			t.Errorf("%s: Decide allocates %v times per call, want 0", tc.name, allocs)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	table := testTable()
	local := localSet{pods: true}
	for _, bc := range []struct {
		name string
		req  Request
	}{
		{"local", Request{IsResourceRequest: true, GVR: pods}},
		{"proxy-1", Request{IsResourceRequest: true, GVR: widgets}},
		{"proxy-4", Request{IsResourceRequest: true, GVR: gadgets}},
		{"notfound", Request{IsResourceRequest: true, GVR: unknown}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				decide(table, bc.req, self, local)
			}
		})
	}
}
