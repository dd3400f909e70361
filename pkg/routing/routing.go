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

// Package routing is the one routing decision shared by the filter inside
// every kube-apiserver and by RouteReview, so the review cannot drift from
// what really happens. It is pure: routing tables and a request in, a
// decision out. The filter imports it, so it must compile against the
// k8s.io libraries of every supported release (hack/verify-filter-builds.sh).
//
// The files, in the order a request reads them: decide.go, the decision
// for a resource request (Decide) and for a candidate before each attempt
// (StillCandidate); snapshot.go, what a decision reads (the view, this
// server's discovery, the registration Leases) and when a Lease vouches
// for a server; routing.go, the view's table; groupversion.go, the
// decisions for discovery documents; review.go and drain.go, RouteReview
// and the drain what-if on the extension's snapshot.
package routing

import (
	"cmp"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/nopeer"
)

// Peer is one server that serves a GVR.
type Peer struct {
	ID       string
	Endpoint string
	Ready    bool
	// Left peers are kept until their tombstone expires: their GVRs answer
	// 503 rather than a false 404 while a server restarts.
	Left bool
	// ShutDown is true when it left by a graceful shutdown.
	ShutDown bool
	// NotReadySince is when it stopped being ready (its Ready condition's
	// last transition); zero when ready or not known.
	NotReadySince time.Time
	// Refused is true when it is not ready because the view's last read
	// of it was refused: nothing listens at its endpoint (the process
	// crashed or was killed), unlike a pause or a partition, which time
	// out. It is not Recovering: a kube-apiserver takes far longer than
	// RecoveryWindow to listen and be ready again.
	Refused bool
}

// Route says who serves one GVR.
type Route struct {
	GVR               schema.GroupVersionResource
	Peers             []Peer
	ServedByAll       bool
	ClusterWide       bool
	ClusterWideSource string
}

// Table indexes routes by GVR. It is immutable once built, so the filter
// swaps whole tables and reads them without locks.
type Table struct {
	routes map[schema.GroupVersionResource]*Route
	// byGV lists each group-version's routes, for discovery requests that
	// name a group-version rather than a resource.
	byGV map[schema.GroupVersion][]*Route
	// peers are the servers the APIServerPeers name, by ID.
	peers map[string]Peer
}

// NewTable builds a table from PeerRoutingTable objects and the
// APIServerPeers: each peer's own object decides its readiness and
// endpoint (routing tables do not carry readiness), so a peer going
// not-ready changes one object. A peer a table names without an
// APIServerPeer is not ready.
func NewTable(tables []*v1alpha1.PeerRoutingTable, peers []*v1alpha1.APIServerPeer) *Table {
	byID := make(map[string]Peer, len(peers))
	for _, p := range peers {
		byID[p.Spec.ServerID] = PeerFromObject(p)
	}
	t := &Table{routes: make(map[schema.GroupVersionResource]*Route, len(tables)), byGV: map[schema.GroupVersion][]*Route{}, peers: byID}
	for _, pt := range tables {
		gvr := schema.GroupVersionResource{Group: pt.Spec.Group, Version: pt.Spec.Version, Resource: pt.Spec.Resource}
		r := &Route{
			GVR:               gvr,
			ServedByAll:       pt.Status.ServedByAll,
			ClusterWide:       pt.Status.ClusterWide,
			ClusterWideSource: pt.Status.ClusterWideSource,
			Peers:             make([]Peer, 0, len(pt.Status.Peers)),
		}
		for _, p := range pt.Status.Peers {
			if known, ok := byID[p.ServerID]; ok {
				r.Peers = append(r.Peers, known)
				continue
			}
			// No APIServerPeer (yet): not a proxy target.
			r.Peers = append(r.Peers, Peer{ID: p.ServerID, Endpoint: p.Endpoint, Left: p.Left})
		}
		t.routes[gvr] = r
		t.byGV[gvr.GroupVersion()] = append(t.byGV[gvr.GroupVersion()], r)
	}
	return t
}

// NewTableFromObjects is NewTable for listed objects (a List's items).
func NewTableFromObjects(tables []v1alpha1.PeerRoutingTable, peers []v1alpha1.APIServerPeer) *Table {
	tp := make([]*v1alpha1.PeerRoutingTable, len(tables))
	for i := range tables {
		tp[i] = &tables[i]
	}
	pp := make([]*v1alpha1.APIServerPeer, len(peers))
	for i := range peers {
		pp[i] = &peers[i]
	}
	return NewTable(tp, pp)
}

// PeerFromObject reads a peer's routing facts from its APIServerPeer.
func PeerFromObject(p *v1alpha1.APIServerPeer) Peer {
	out := Peer{
		ID: p.Spec.ServerID, Endpoint: p.Spec.Endpoint, Left: p.Status.LeftTime != nil,
		Ready: v1alpha1.PeerStatusReady(p.Status.Conditions, p.Status.LeftTime),
	}
	if c := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); c != nil && !out.Ready {
		out.NotReadySince = c.LastTransitionTime.Time
		out.ShutDown = out.Left && c.Reason == v1alpha1.PeerReasonShutDown
		out.Refused = c.Reason == string(nopeer.ErrRefused)
	}
	return out
}

// Lookup returns the route of a GVR, or nil.
func (t *Table) Lookup(gvr schema.GroupVersionResource) *Route {
	if t == nil {
		return nil
	}
	return t.routes[gvr]
}

// Peer returns what the APIServerPeer of a server says, and whether
// there is one.
func (t *Table) Peer(id string) (Peer, bool) {
	if t == nil {
		return Peer{}, false
	}
	p, ok := t.peers[id]
	return p, ok
}

// Peers lists the servers the APIServerPeers name, by ID.
func (t *Table) Peers() []Peer {
	if t == nil {
		return nil
	}
	out := make([]Peer, 0, len(t.peers))
	for _, p := range t.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Len is the number of routes.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.routes)
}

// Local tells whether the receiving server serves a GVR itself.
type Local interface {
	Serves(gvr schema.GroupVersionResource) bool
}

// LocalFunc adapts a function to Local.
type LocalFunc func(schema.GroupVersionResource) bool

// Serves implements Local.
func (f LocalFunc) Serves(gvr schema.GroupVersionResource) bool { return f(gvr) }

// GVRString is group/version/resource, or version/resource for the core
// group: how kubectl users write a GVR.
func GVRString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

func peerIDs(peers []Peer) string {
	ids := make([]string, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	return strings.Join(ids, ", ")
}
