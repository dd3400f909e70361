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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// TestNewTableReadinessFromPeers: routing tables name the servers; each
// server's own APIServerPeer gives its readiness, departure and endpoint,
// and a server with none is not a proxy target.
func TestNewTableReadinessFromPeers(t *testing.T) {
	list := func(ids ...string) routeOpt {
		return func(t *v1alpha1.PeerRoutingTable) {
			for _, id := range ids {
				t.Status.Peers = append(t.Status.Peers, v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id)})
			}
		}
	}
	tables := []*v1alpha1.PeerRoutingTable{
		rt(widgets, list("a", "b", "c", "d", "e")),
		rt(gadgets, list("a")),
		rt(pods, list("c")),
	}
	peers := []*v1alpha1.APIServerPeer{
		peerObject("a", "10.0.0.1:6443", metav1.ConditionFalse, false), // not ready
		peerObject("b", "10.0.0.2:6443", metav1.ConditionTrue, true),   // left
		peerObject("c", "10.0.0.3:6443", metav1.ConditionTrue, false),  // ready, at its own endpoint
		peerObject("d", "10.0.0.4:6443", "", false),                    // no Ready condition yet
		peerObject("z", "10.0.0.9:6443", metav1.ConditionTrue, false),  // serves nothing listed
	}
	table := NewTable(tables, peers)
	got := table.Lookup(widgets).Peers
	want := []Peer{
		{ID: "a", Endpoint: "10.0.0.1:6443"},
		{ID: "b", Endpoint: "10.0.0.2:6443", Left: true},
		{ID: "c", Endpoint: "10.0.0.3:6443", Ready: true},
		{ID: "d", Endpoint: "10.0.0.4:6443"},
		// e has no APIServerPeer (yet): listed, not ready.
		{ID: "e", Endpoint: endpointOf("e")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("peers = %+v\nwant %+v", got, want)
	}
	res := decide(table, Request{IsResourceRequest: true, GVR: widgets}, self, nil)
	if res.Decision != v1alpha1.RouteProxy || !reflect.DeepEqual(ids(res.Candidates), []string{"c"}) {
		t.Fatalf("widgets: %s %v, want Proxy [c]", res.Decision, ids(res.Candidates))
	}
	if res := decide(table, Request{IsResourceRequest: true, GVR: gadgets}, self, nil); res.Decision != v1alpha1.RouteUnavailable {
		t.Fatalf("gadgets: %s (%s), want Unavailable", res.Decision, res.Reason())
	}
	if res := decide(table, Request{IsResourceRequest: true, GVR: pods}, self, nil); res.Decision != v1alpha1.RouteProxy || res.Candidates[0].Endpoint != "10.0.0.3:6443" {
		t.Fatalf("pods: %s %+v, want Proxy to c at its own endpoint", res.Decision, res.Candidates)
	}
}

func TestPeerFromObject(t *testing.T) {
	cases := []struct {
		name string
		obj  *v1alpha1.APIServerPeer
		want Peer
	}{
		{"ready", peerObject("a", "e:1", metav1.ConditionTrue, false), Peer{ID: "a", Endpoint: "e:1", Ready: true}},
		{"not ready", peerObject("a", "e:1", metav1.ConditionFalse, false), Peer{ID: "a", Endpoint: "e:1"}},
		{"unknown", peerObject("a", "e:1", metav1.ConditionUnknown, false), Peer{ID: "a", Endpoint: "e:1"}},
		{"no condition", peerObject("a", "e:1", "", false), Peer{ID: "a", Endpoint: "e:1"}},
		{"left while ready", peerObject("a", "e:1", metav1.ConditionTrue, true), Peer{ID: "a", Endpoint: "e:1", Left: true}},
	}
	for _, tc := range cases {
		if got := PeerFromObject(tc.obj); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
