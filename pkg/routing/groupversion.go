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
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// GroupVersionResult says which server answers a discovery request that
// names a group-version rather than a resource: the legacy
// /apis/<group>/<version> (or /api/v1) resource list and the OpenAPI v3
// document of that group-version.
type GroupVersionResult struct {
	// Decision is Local (this server serves every resource of the
	// group-version that any ready server serves), Proxy (a peer does:
	// Candidates), Unavailable (only servers that are not ready or have
	// left serve it) or NotFound (no route names it: the local chain
	// answers).
	Decision v1alpha1.RouteDecision
	// Split is true with Proxy when no single ready server serves the
	// whole group-version: Candidates then lists the ready peers that
	// serve part of it, those serving the most first.
	Split bool
	// Candidates are the ready peers to ask, in order (Proxy only).
	Candidates []Peer
	// Served counts, for Split, the resources Candidates[0] serves and
	// this server serves.
	PeerServes, LocalServes int
}

// DecideGroupVersion routes a discovery request for gv received by server
// self. A resource counts when a ready server serves it; cluster-wide
// routes (CRDs, APIServices) are served here too and never decide.
func DecideGroupVersion(t *Table, gv schema.GroupVersion, self string, local Local) GroupVersionResult {
	var routes []*Route
	if t != nil {
		routes = t.byGV[gv]
	}
	if len(routes) == 0 {
		return GroupVersionResult{Decision: v1alpha1.RouteNotFound}
	}
	live, localServes, departed := 0, 0, false
	// served counts the live resources each ready peer serves.
	served := map[string]int{}
	peers := map[string]Peer{}
	for _, r := range routes {
		if r.ClusterWide {
			continue
		}
		here := local != nil && local.Serves(r.GVR)
		readyElsewhere := false
		for _, p := range r.Peers {
			if p.ID == self {
				continue
			}
			if v1alpha1.PeerReady(p.Ready, p.Left) {
				readyElsewhere = true
			} else {
				departed = true
			}
		}
		if !here && !readyElsewhere {
			continue
		}
		live++
		if here {
			localServes++
		}
		for _, p := range r.Peers {
			if p.ID != self && v1alpha1.PeerReady(p.Ready, p.Left) {
				served[p.ID]++
				peers[p.ID] = p
			}
		}
	}
	switch {
	case live == 0 && departed:
		return GroupVersionResult{Decision: v1alpha1.RouteUnavailable}
	case live == 0:
		return GroupVersionResult{Decision: v1alpha1.RouteNotFound}
	case localServes == live:
		return GroupVersionResult{Decision: v1alpha1.RouteLocal}
	}
	res := GroupVersionResult{Decision: v1alpha1.RouteProxy}
	for id, n := range served {
		if n == live {
			res.Candidates = append(res.Candidates, peers[id])
		}
	}
	if len(res.Candidates) > 0 {
		orderCandidates(self, res.Candidates)
		return res
	}
	// No server serves all of it (a release that removed one resource of
	// a group-version and added another): every peer serving part of it,
	// most first.
	res.Split = true
	for id := range served {
		res.Candidates = append(res.Candidates, peers[id])
	}
	orderCandidates(self, res.Candidates)
	slices.SortStableFunc(res.Candidates, func(a, b Peer) int { return cmp.Compare(served[b.ID], served[a.ID]) })
	res.PeerServes, res.LocalServes = served[res.Candidates[0].ID], localServes
	return res
}

// GroupVersions lists the group-versions the table routes.
func (t *Table) GroupVersions() []schema.GroupVersion {
	if t == nil {
		return nil
	}
	out := make([]schema.GroupVersion, 0, len(t.byGV))
	for gv := range t.byGV {
		out = append(out, gv)
	}
	return out
}
