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

package compute

import (
	"sort"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

// routes builds one PeerRoutingTable per GVR any peer's document lists, and
// counts each peer's groups and resources on the way (one pass over the
// documents, which is most of the cost).
func routes(peers []*Peer, clusterWide map[schema.GroupVersion]string, ex func(string, string) bool) ([]v1alpha1.PeerRoutingTable, []peerCount) {
	type acc struct {
		gvr   schema.GroupVersionResource
		scope apidiscoveryv2.ResourceScope
		peers []v1alpha1.RoutingPeer
		// last is the index of the last peer added: a GVR listed twice by
		// one peer (in /api and /apis, or a duplicate) counts once.
		last int
	}
	hint := 0
	for _, p := range peers {
		if p.HasDocument {
			hint = max(hint, merge.CountResources(p.API, p.APIs))
		}
	}
	hint += hint / 8
	index := make(map[schema.GroupVersionResource]int32, hint)
	accs := make([]acc, 0, hint)
	// One slab for every route's peers, len(peers) slots per GVR: a few
	// allocations instead of one per route.
	var slab []v1alpha1.RoutingPeer
	counts := make([]peerCount, len(peers))
	groups := map[string]struct{}{}
	present := int32(0)
	for pi, p := range peers { // in ID order, so each route's peers are sorted
		if !p.Left {
			present++
		}
		if !p.HasDocument {
			continue
		}
		clear(groups)
		rp := v1alpha1.RoutingPeer{ServerID: p.ServerID, Endpoint: p.Endpoint, Left: p.Left}
		for gvr, r := range merge.Resources(p.API, p.APIs) {
			if excluded(ex, gvr.Group, gvr.Version) {
				continue
			}
			i, ok := index[gvr]
			if !ok {
				if len(slab) < len(peers) {
					slab = make([]v1alpha1.RoutingPeer, len(peers)*max(64, hint-len(accs)))
				}
				i = int32(len(accs))
				index[gvr] = i
				accs = append(accs, acc{gvr: gvr, scope: r.Scope, peers: slab[:0:len(peers)], last: -1})
				slab = slab[len(peers):]
			}
			a := &accs[i]
			if a.last == pi {
				continue
			}
			a.last = pi
			a.peers = append(a.peers, rp)
			counts[pi].resources++
			groups[gvr.Group] = struct{}{}
		}
		counts[pi].groups = int32(len(groups))
	}
	out := make([]v1alpha1.PeerRoutingTable, len(accs))
	for i := range accs {
		a := &accs[i]
		t := &out[i]
		t.Name = RouteName(a.gvr)
		t.Spec = v1alpha1.PeerRoutingTableSpec{Group: a.gvr.Group, Version: a.gvr.Version, Resource: a.gvr.Resource, Scope: a.scope}
		t.Status = v1alpha1.PeerRoutingTableStatus{Peers: a.peers, TotalPeers: present}
		serving := int32(0)
		for _, p := range a.peers {
			if !p.Left {
				serving++
			}
		}
		t.Status.ServedByAll = present > 0 && serving == present
		if src, ok := clusterWide[a.gvr.GroupVersion()]; ok {
			t.Status.ClusterWide, t.Status.ClusterWideSource = true, src
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, counts
}
