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
	"fmt"
	"slices"
	"strings"
	"time"

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
	// RecordedBy is set with Unavailable when no route names the
	// group-version but a live server's registration Lease records it and
	// this server serves none of it: the view lags behind that server, and
	// the documents are built from the view (503 with Retry-After).
	RecordedBy string
	// GroupVersion is the group-version decided (DecideGroup: the first of
	// the group that decided).
	GroupVersion schema.GroupVersion
}

// RetryAfter tells whether the decision's 503 names a short wait: the
// view has not caught up with a live server yet.
func (r GroupVersionResult) RetryAfter() bool { return r.RecordedBy != "" }

// Reason is the message of an Unavailable decision's 503.
func (r GroupVersionResult) Reason() string {
	if r.RecordedBy != "" {
		return fmt.Sprintf("%s is served by kube-apiserver %s (its registration lease records it), and this server's peer routing view does not list it yet", r.GroupVersion.String(), r.RecordedBy)
	}
	return "no ready server serves it"
}

// DecideGroupVersion routes a discovery request for gv received by
// s.Self. A resource counts when a server the view says is ready serves
// it; cluster-wide routes (CRDs, APIServices) are served here too and
// never decide. A group-version no route names is Unavailable while a live
// server's registration Lease records it and Self serves none of it
// (RecordedBy), else NotFound (the chain answers).
func DecideGroupVersion(s *Snapshot, gv schema.GroupVersion, now time.Time) GroupVersionResult {
	res := decideGroupVersion(s.Table, gv, s.Self, s.Local)
	res.GroupVersion = gv
	if res.Decision == v1alpha1.RouteNotFound && !servesGroupVersion(s.Local, gv) {
		if id, ok := s.firstRecording(now, func(sv *Served) bool { return sv.ServesGroupVersion(gv) }); ok {
			res.Decision, res.RecordedBy = v1alpha1.RouteUnavailable, id
		}
	}
	return res
}

// DecideGroup decides the /apis/<group> document of a group that the
// merged view does not list: Unavailable while a group-version of it is
// (DecideGroupVersion), the first such group-version in GroupVersion;
// else NotFound (the chain answers).
func DecideGroup(s *Snapshot, group string, now time.Time) GroupVersionResult {
	gvs := s.Table.GroupVersions()
	sortGroupVersions(gvs)
	for _, gv := range gvs {
		if gv.Group != group {
			continue
		}
		if res := decideGroupVersion(s.Table, gv, s.Self, s.Local); res.Decision == v1alpha1.RouteUnavailable {
			res.GroupVersion = gv
			return res
		}
	}
	if servesGroup(s.Local, group) {
		return GroupVersionResult{Decision: v1alpha1.RouteNotFound}
	}
	var gv schema.GroupVersion
	id, ok := s.firstRecording(now, func(sv *Served) bool {
		if gvs := sv.GroupVersions(group); len(gvs) > 0 {
			gv = gvs[0]
			return true
		}
		return false
	})
	if !ok {
		return GroupVersionResult{Decision: v1alpha1.RouteNotFound}
	}
	return GroupVersionResult{Decision: v1alpha1.RouteUnavailable, RecordedBy: id, GroupVersion: gv}
}

// DecideRoot decides the /api (legacy: the core group) or /apis document
// of a server whose view is not synced (Table nil), past its start: its
// own chain's document is all it has, and that lacks what only its peers
// serve; a client acting on it gets no error (the namespace controller
// finalized a namespace with objects of a peer's kinds left in it: chaos
// seed 2718). So it is Unavailable while a live server's registration
// Lease records a resource of that document that Self does not serve
// (RecordedBy; GroupVersion is that resource's), as DecideGroupVersion is
// for one group-version; else Local: the chain answers, as stock
// kube-apiserver (every server serves the same, or no server records what
// it serves). With a view, the documents are merged from it: Local. And
// Local without peerdiscovery's APIService (not installed yet, or
// removed): a cluster without peerdiscovery gets stock discovery, so that
// it can install it through any server.
func DecideRoot(s *Snapshot, legacy bool, now time.Time) GroupVersionResult {
	if s.Table != nil || s.Local == nil || !s.ViewRegistered {
		return GroupVersionResult{Decision: v1alpha1.RouteLocal}
	}
	var missing schema.GroupVersionResource
	id, ok := s.firstRecording(now, func(sv *Served) bool {
		found := false
		for gvr := range sv.gvrs {
			if (gvr.Group == "") != legacy || s.Local.Serves(gvr) {
				continue
			}
			if !found || gvrLess(gvr, missing) {
				missing, found = gvr, true
			}
		}
		return found
	})
	if !ok {
		return GroupVersionResult{Decision: v1alpha1.RouteLocal}
	}
	return GroupVersionResult{Decision: v1alpha1.RouteUnavailable, RecordedBy: id, GroupVersion: missing.GroupVersion()}
}

func gvrLess(a, b schema.GroupVersionResource) bool {
	return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Version, b.Version), strings.Compare(a.Resource, b.Resource)) < 0
}

// firstRecording returns the first server (by ID) other than Self whose
// registration Lease is live at now and whose record matches.
func (s *Snapshot) firstRecording(now time.Time, match func(*Served) bool) (string, bool) {
	ids := make([]string, 0, len(s.Records))
	for id := range s.Records {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if r := s.Records[id]; id != s.Self && r.Live(now) && r.Served != nil && match(r.Served) {
			return id, true
		}
	}
	return "", false
}

// GroupLocal is what Local must also tell for the group-level decisions;
// the filter's local discovery and ListedLocal implement it. A Local
// without it serves no group-version as far as they are concerned.
type GroupLocal interface {
	ServesGroupVersion(gv schema.GroupVersion) bool
	ServesGroup(group string) bool
}

func servesGroupVersion(l Local, gv schema.GroupVersion) bool {
	g, ok := l.(GroupLocal)
	return ok && g.ServesGroupVersion(gv)
}

func servesGroup(l Local, group string) bool {
	g, ok := l.(GroupLocal)
	return ok && g.ServesGroup(group)
}

func sortGroupVersions(gvs []schema.GroupVersion) {
	slices.SortFunc(gvs, func(a, b schema.GroupVersion) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Version, b.Version))
	})
}

func decideGroupVersion(t *Table, gv schema.GroupVersion, self string, local Local) GroupVersionResult {
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
