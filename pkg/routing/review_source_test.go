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
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

func TestReviewSourcePeer(t *testing.T) {
	table := reviewTable()
	cases := []struct {
		name       string
		path       string
		source     string
		want       v1alpha1.RouteDecision
		target     string
		endpoint   string
		candidates []string
		reason     string
	}{{
		name: "no source: served by all is local",
		path: "/api/v1/namespaces/ns1/pods", want: v1alpha1.RouteLocal,
		reason: "served by this server",
	}, {
		name: "no source: not served by all is proxied",
		path: "/apis/apps/v1/deployments", want: v1alpha1.RouteProxy,
		target: expectedOrder("", []string{"a", "b"})[0], endpoint: endpointOf(expectedOrder("", []string{"a", "b"})[0]),
		candidates: expectedOrder("", []string{"a", "b"}), reason: "proxy to",
	}, {
		name: "source listed: served there",
		path: "/apis/apps/v1/namespaces/ns1/deployments/d1", source: "b", want: v1alpha1.RouteLocal,
		reason: "apps/v1/deployments is served by this server",
	}, {
		name: "source listed although not ready: it still serves it itself",
		path: "/apis/example.com/v1/widgets", source: "c", want: v1alpha1.RouteLocal,
	}, {
		name: "source not listed: proxied to a ready peer, never to itself",
		path: "/apis/apps/v1/namespaces/ns1/deployments", source: "c", want: v1alpha1.RouteProxy,
		target: expectedOrder("c", []string{"a", "b"})[0], endpoint: endpointOf(expectedOrder("c", []string{"a", "b"})[0]),
		candidates: expectedOrder("c", []string{"a", "b"}),
	}, {
		name: "source not listed: only the ready peer is a candidate",
		path: "/apis/example.com/v1/widgets/w1", source: "b", want: v1alpha1.RouteProxy,
		target: "a", endpoint: endpointOf("a"), candidates: []string{"a"},
	}, {
		name: "source listed but left: the others decide",
		path: "/apis/example.com/v1/widgets", source: "d", want: v1alpha1.RouteProxy,
		target: "a", endpoint: endpointOf("a"), candidates: []string{"a"},
	}, {
		name: "source left, the other listed peer left too: 503, the source is no candidate",
		path: "/apis/example.com/v1/departed", source: "e", want: v1alpha1.RouteUnavailable,
		candidates: []string{"f"}, reason: "none is ready",
	}, {
		name: "only tombstoned peers: 503",
		path: "/apis/example.com/v1/departed", source: "z", want: v1alpha1.RouteUnavailable,
		candidates: expectedOrder("z", []string{"e", "f"}), reason: "served by e, f but none is ready",
	}, {
		name: "cluster-wide: local",
		path: "/apis/crd.example.com/v1/things", source: "z", want: v1alpha1.RouteLocal,
		candidates: []string{"a"}, reason: "CustomResourceDefinition",
	}, {
		name: "unknown: not found",
		path: "/apis/nowhere.example.com/v1/ghosts", source: "a", want: v1alpha1.RouteNotFound,
		reason: "no peer serves",
	}, {
		name: "no source, unknown GVR",
		path: "/apis/nowhere.example.com/v1/ghosts", want: v1alpha1.RouteNotFound,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := review(t, table, v1alpha1.RouteReviewSpec{Verb: "get", Path: tc.path, SourcePeer: tc.source})
			if st.Decision != tc.want || st.Target != tc.target || st.TargetEndpoint != tc.endpoint {
				t.Fatalf("got %s -> %q (%q), want %s -> %q (%q); reason %q", st.Decision, st.Target, st.TargetEndpoint, tc.want, tc.target, tc.endpoint, st.Reason)
			}
			if got := reviewIDs(st.Candidates); !reflect.DeepEqual(got, tc.candidates) {
				t.Fatalf("candidates = %v, want %v", got, tc.candidates)
			}
			if st.Reason == "" || !strings.Contains(st.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to contain %q", st.Reason, tc.reason)
			}
		})
	}
}

// TestReviewCandidatesInOrderTried: whatever the decision, the candidates
// are in the source's order of preference (the order its filter tries
// them), not the routing table's.
func TestReviewCandidatesInOrderTried(t *testing.T) {
	all := []string{"p1", "p2", "p3", "p4", "p5", "p6"}
	for _, source := range []string{"", "q", "z"} {
		st := review(t, reviewTable(), v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/example.com/v1/sleepy", SourcePeer: source})
		want := expectedOrder(source, all)
		if st.Decision != v1alpha1.RouteUnavailable || !reflect.DeepEqual(reviewIDs(st.Candidates), want) {
			t.Fatalf("from %q: %s, candidates %v, want Unavailable, %v", source, st.Decision, reviewIDs(st.Candidates), want)
		}
	}
	if slices.Equal(expectedOrder("z", all), all) {
		t.Fatal("the fixture's table order is the preference order: the test cannot tell them apart")
	}
}

// TestReviewCandidatesCarryState: the review shows each candidate's state,
// as its APIServerPeer has it: a server that left is never ready.
func TestReviewCandidatesCarryState(t *testing.T) {
	st := review(t, reviewTable(), v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/example.com/v1/departed", SourcePeer: "z"})
	byID := map[string]v1alpha1.RouteCandidate{
		"e": {ServerID: "e", Endpoint: endpointOf("e"), Left: true},
		"f": {ServerID: "f", Endpoint: endpointOf("f"), Left: true},
	}
	var want []v1alpha1.RouteCandidate
	for _, id := range expectedOrder("z", []string{"e", "f"}) {
		want = append(want, byID[id])
	}
	if !reflect.DeepEqual(st.Candidates, want) {
		t.Fatalf("candidates = %+v, want %+v", st.Candidates, want)
	}
}

// TestReviewAssumptions: the review names what it cannot see, and only
// where it bears on the decision.
func TestReviewAssumptions(t *testing.T) {
	table := reviewTable()
	unregistered := reviewPeer("c")
	unregistered.Spec.Sources = []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice}
	unregistered.Status.Stale = true
	cases := []struct {
		name   string
		spec   v1alpha1.RouteReviewSpec
		source *v1alpha1.APIServerPeer
		want   []string // each a part of one assumption, in order
	}{{
		name: "non-resource: decided from the request alone",
		spec: v1alpha1.RouteReviewSpec{Verb: "get", Path: "/healthz", SourcePeer: "a"}, source: reviewPeer("a"),
	}, {
		name: "already proxied: decided from the request alone",
		spec: v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/apps/v1/deployments", SourcePeer: "c", PeerProxied: true}, source: reviewPeer("c"),
	}, {
		name: "served by the source: its discovery only",
		spec: v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/apps/v1/deployments", SourcePeer: "a"}, source: reviewPeer("a"),
		want: []string{"a serves the resources its routing tables list it for: its discovery as peerdiscovery last read it (at 2026-05-01T12:00:00Z)"},
	}, {
		name: "proxied read: discovery, sync, reachability with failover",
		spec: v1alpha1.RouteReviewSpec{Verb: "list", Path: "/apis/apps/v1/deployments", SourcePeer: "z"}, source: reviewPeer("z"),
		want: []string{"z serves", "synced its routing state", "one that fails before answering is skipped"},
	}, {
		name: "proxied write: never sent twice",
		spec: v1alpha1.RouteReviewSpec{Verb: "POST", Path: "/apis/apps/v1/namespaces/x/deployments", SourcePeer: "z"}, source: reviewPeer("z"),
		want: []string{"z serves", "synced its routing state", "is never sent again"},
	}, {
		name: "a source without a registration Lease, a stale read",
		spec: v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/apps/v1/deployments", SourcePeer: "c"}, source: unregistered,
		want: []string{"a copy kept after failed reads", "c has no registration Lease", "synced its routing state", "skipped"},
	}, {
		name: "a source that left",
		spec: v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/example.com/v1/widgets", SourcePeer: "d"}, source: reviewPeer("d"),
		want: []string{"d serves", "d has left", "synced its routing state", "skipped"},
	}, {
		name: "no source",
		spec: v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/nowhere.example.com/v1/ghosts"},
		want: []string{"no sourcePeer", "synced its routing state", "no live server's registration Lease records this resource"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := reviewView(table, tc.spec, tc.source, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Assumptions) != len(tc.want) {
				t.Fatalf("assumptions %q, want %d", st.Assumptions, len(tc.want))
			}
			for i, part := range tc.want {
				if !strings.Contains(st.Assumptions[i], part) {
					t.Errorf("assumption %d %q, want it to contain %q", i, st.Assumptions[i], part)
				}
			}
		})
	}
}
