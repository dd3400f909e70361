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
package routing

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
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

// Request is what the decision needs to know about one request.
type Request struct {
	// IsResourceRequest is false for /healthz, /version, discovery, ...
	IsResourceRequest bool
	GVR               schema.GroupVersionResource
	// AlreadyProxied is true when a peer already proxied the request here
	// (x-kubernetes-peer-proxied); such a request is never proxied again.
	AlreadyProxied bool
}

// Local tells whether the receiving server serves a GVR itself.
type Local interface {
	Serves(gvr schema.GroupVersionResource) bool
}

// LocalFunc adapts a function to Local.
type LocalFunc func(schema.GroupVersionResource) bool

// Serves implements Local.
func (f LocalFunc) Serves(gvr schema.GroupVersionResource) bool { return f(gvr) }

// why is the reason of a decision; the text is built only when asked, so
// the filter's locally served path allocates nothing.
type why int

const (
	whyNonResource why = iota
	whyProxied
	whyLocal
	whyUnknown
	whyClusterWide
	whyOnlySelf
	whyNoneReady
	whyProxy
	whyRecorded
	whyVouched
	whyUnsynced
	whyUnsyncedChain
	whyLocalUnknown
)

// Result is a decision and why.
type Result struct {
	Decision v1alpha1.RouteDecision
	// Candidates are the peers to try, in order (Proxy only): those the
	// view says are ready, then those only their registration Leases
	// vouch for.
	Candidates []Peer
	// ByLease is true when Candidates[0] comes from its registration
	// Lease, not from a route of the view.
	ByLease bool
	// RetryAfter is true for an Unavailable decision whose 503 names a
	// short wait (RecoveryWindow).
	RetryAfter bool
	// Route is the GVR's route, nil when none.
	Route *Route
	GVR   schema.GroupVersionResource
	self  string
	why   why
}

// Unsynced tells whether an Unavailable decision is for a view not synced
// yet (503 with Retry-After, within the sync grace).
func (r Result) Unsynced() bool { return r.why == whyUnsynced }

// Reason explains the decision; for Unavailable it is the filter's 503
// message.
func (r Result) Reason() string {
	gvr := GVRString(r.GVR)
	switch r.why {
	case whyNonResource:
		return "not a resource request"
	case whyProxied:
		return "already proxied by a peer; never proxied twice"
	case whyLocal:
		return gvr + " is served by this server"
	case whyUnknown:
		return "no peer serves " + gvr
	case whyClusterWide:
		return fmt.Sprintf("%s is cluster-wide (%s): every server serves it, never proxied", gvr, r.Route.ClusterWideSource)
	case whyOnlySelf:
		return gvr + " is listed only for this server, which does not serve it now"
	case whyNoneReady:
		var others []Peer
		for _, p := range r.Route.Peers {
			if p.ID != r.self {
				others = append(others, p)
			}
		}
		msg := fmt.Sprintf("%s is served by %s but none is ready", gvr, peerIDs(others))
		if r.RetryAfter {
			msg += "; " + RecoveringNote
		}
		return msg
	case whyProxy:
		return fmt.Sprintf("%s is not served here; proxy to %s (ready peers, in order: %s)", gvr, r.Candidates[0].ID, peerIDs(r.Candidates))
	case whyRecorded:
		return fmt.Sprintf("%s is not served here and no route names it yet; the registration Lease of %s records it: proxy to %s", gvr, peerIDs(r.Candidates), r.Candidates[0].ID)
	case whyVouched:
		return fmt.Sprintf("%s is not served here and no server the view routes it to is ready; the registration Lease of %s records it (renewed after the view, which cannot be read now or judged its Lease lapsed, last saw it not ready): proxy to %s", gvr, peerIDs(r.Candidates), r.Candidates[0].ID)
	case whyUnsynced:
		return fmt.Sprintf("%s is not served by this kube-apiserver, and its peer routing state is not synced yet", r.GVR.GroupResource().String())
	case whyUnsyncedChain:
		return "no peer serves " + gvr + " as far as the registration Leases say, and the peer routing state is not synced: past its grace period, this server's own chain answers"
	case whyLocalUnknown:
		return "this server's own discovery is not read yet: its own chain answers"
	}
	return ""
}

// Decide routes one request received by s.Self. It is the only routing
// decision for resource requests: the filter acts on it, RouteReview
// reports it. The locally served path does not allocate.
//
// In order: what needs no routing (not a resource, already proxied, served
// here) stays here; a cluster-wide route stays here; the peers to proxy to
// are those the view routes the GVR to and says are ready, then the live
// servers whose registration Lease records the GVR and vouches for them
// (Snapshot.vouched): the view may lag, a live server's own record never
// gives a 404 or a needless 503. With none, a route with other servers
// is Unavailable (503), and no route is NotFound (the chain's 404), but
// while the view is not synced, within its grace, a GVR Self does not
// serve is Unavailable.
func Decide(s *Snapshot, req Request, now time.Time) Result {
	res := Result{GVR: req.GVR, self: s.Self}
	switch {
	case !req.IsResourceRequest:
		res.Decision, res.why = v1alpha1.RouteLocal, whyNonResource
		return res
	case req.AlreadyProxied:
		res.Decision, res.why = v1alpha1.RouteLocal, whyProxied
		return res
	case s.Local == nil:
		res.Decision, res.why = v1alpha1.RouteLocal, whyLocalUnknown
		return res
	case s.Local.Serves(req.GVR):
		res.Decision, res.why = v1alpha1.RouteLocal, whyLocal
		return res
	}
	route := s.Table.Lookup(req.GVR)
	res.Route = route
	if route != nil && route.ClusterWide {
		res.Decision, res.why = v1alpha1.RouteLocal, whyClusterWide
		return res
	}
	others := 0
	if route != nil {
		for _, p := range route.Peers {
			if p.ID == s.Self {
				continue
			}
			others++
			if viewReady(p) {
				res.Candidates = append(res.Candidates, p)
			}
		}
	}
	orderCandidates(s.Self, res.Candidates)
	if vouched := s.vouchedFor(req.GVR, res.Candidates, now); len(vouched) > 0 {
		if len(res.Candidates) == 0 {
			res.ByLease = true
		}
		res.Candidates = append(res.Candidates, vouched...)
	}
	switch {
	case len(res.Candidates) > 0 && !res.ByLease:
		res.Decision, res.why = v1alpha1.RouteProxy, whyProxy
	case len(res.Candidates) > 0 && others > 0:
		res.Decision, res.why = v1alpha1.RouteProxy, whyVouched
	case len(res.Candidates) > 0:
		res.Decision, res.why = v1alpha1.RouteProxy, whyRecorded
	case others > 0:
		res.Decision, res.why = v1alpha1.RouteUnavailable, whyNoneReady
		res.RetryAfter = res.retryExpected(now)
	case route != nil:
		// Only this server is listed but it does not serve the GVR now:
		// the local chain is the truth (it answers 404 until it serves it).
		res.Decision, res.why = v1alpha1.RouteNotFound, whyOnlySelf
	case s.Table == nil && now.Before(s.SyncGraceUntil):
		res.Decision, res.why, res.RetryAfter = v1alpha1.RouteUnavailable, whyUnsynced, true
	case s.Table == nil:
		res.Decision, res.why = v1alpha1.RouteNotFound, whyUnsyncedChain
	default:
		res.Decision, res.why = v1alpha1.RouteNotFound, whyUnknown
	}
	return res
}

// vouchedFor lists, in Self's order of preference, the servers other than
// Self and those in ready whose registration Lease vouches for them for
// gvr (Snapshot.vouched).
func (s *Snapshot) vouchedFor(gvr schema.GroupVersionResource, ready []Peer, now time.Time) []Peer {
	var out []Peer
	for id := range s.Records {
		if id == s.Self || slices.ContainsFunc(ready, func(p Peer) bool { return p.ID == id }) {
			continue
		}
		if p, ok := s.vouched(id, gvr, now); ok {
			out = append(out, p)
		}
	}
	orderCandidates(s.Self, out)
	return out
}

// orderCandidates orders ready peers by a hash (FNV-1a 64) of
// (self, NUL, peer ID), ties by ID: each source server prefers a fixed peer
// (stable, explainable), while different sources spread over different
// peers.
func orderCandidates(self string, peers []Peer) {
	if len(peers) < 2 {
		return
	}
	h := fnv.New64a()
	key := func(id string) uint64 {
		h.Reset()
		_, _ = h.Write([]byte(self))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(id))
		return h.Sum64()
	}
	slices.SortStableFunc(peers, func(a, b Peer) int {
		return cmp.Or(cmp.Compare(key(a.ID), key(b.ID)), strings.Compare(a.ID, b.ID))
	})
}

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
