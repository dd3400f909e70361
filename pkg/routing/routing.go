// Package routing is the one routing decision shared by the filter inside
// every kube-apiserver and by RouteReview, so the review cannot drift from
// what really happens. It is pure: routing tables and a request in, a
// decision out. It must compile against k8s.io/* v0.36 and v0.37.
package routing

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

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
}

// NewTable builds a table from PeerRoutingTable objects.
func NewTable(tables []*v1alpha1.PeerRoutingTable) *Table {
	t := &Table{routes: make(map[schema.GroupVersionResource]*Route, len(tables))}
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
			r.Peers = append(r.Peers, Peer{ID: p.ServerID, Endpoint: p.Endpoint, Ready: p.Ready, Left: p.Left})
		}
		t.routes[gvr] = r
	}
	return t
}

// Lookup returns the route of a GVR, or nil.
func (t *Table) Lookup(gvr schema.GroupVersionResource) *Route {
	if t == nil {
		return nil
	}
	return t.routes[gvr]
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

// Result is a decision and why.
type Result struct {
	Decision v1alpha1.RouteDecision
	// Candidates are the ready peers to try, in order (Proxy only).
	Candidates []Peer
	// Known are every peer listed for the GVR, for explanations.
	Known  []Peer
	Reason string
}

// Decide routes one request received by server self.
func Decide(t *Table, req Request, self string, local Local) Result {
	if !req.IsResourceRequest {
		return Result{Decision: v1alpha1.RouteLocal, Reason: "not a resource request"}
	}
	if req.AlreadyProxied {
		return Result{Decision: v1alpha1.RouteLocal, Reason: "already proxied by a peer; never proxied twice"}
	}
	gvr := req.GVR
	if local != nil && local.Serves(gvr) {
		return Result{Decision: v1alpha1.RouteLocal, Reason: fmt.Sprintf("%s is served by this server", gvrString(gvr))}
	}
	route := t.Lookup(gvr)
	if route == nil {
		return Result{Decision: v1alpha1.RouteNotFound, Reason: fmt.Sprintf("no peer serves %s", gvrString(gvr))}
	}
	if route.ClusterWide {
		return Result{Decision: v1alpha1.RouteLocal, Known: route.Peers,
			Reason: fmt.Sprintf("%s is cluster-wide (%s): every server serves it, never proxied", gvrString(gvr), route.ClusterWideSource)}
	}
	var ready, others []Peer
	for _, p := range route.Peers {
		if p.ID == self {
			continue
		}
		others = append(others, p)
		if p.Ready && !p.Left {
			ready = append(ready, p)
		}
	}
	if len(others) == 0 {
		// Only this server is listed but it does not serve the GVR now:
		// the local chain is the truth (it answers 404 until it serves it).
		return Result{Decision: v1alpha1.RouteNotFound, Known: route.Peers,
			Reason: fmt.Sprintf("%s is listed only for this server, which does not serve it now", gvrString(gvr))}
	}
	if len(ready) == 0 {
		return Result{Decision: v1alpha1.RouteUnavailable, Known: route.Peers,
			Reason: fmt.Sprintf("%s is served by %s but none is ready", gvrString(gvr), peerIDs(others))}
	}
	orderCandidates(self, ready)
	return Result{Decision: v1alpha1.RouteProxy, Candidates: ready, Known: route.Peers,
		Reason: fmt.Sprintf("%s is not served here; proxy to %s (ready peers: %s)", gvrString(gvr), ready[0].ID, peerIDs(ready))}
}

// orderCandidates orders ready peers by a hash of (self, peer): each source
// server prefers a fixed peer (stable, explainable), while different
// sources spread over different peers.
func orderCandidates(self string, peers []Peer) {
	if len(peers) < 2 {
		return
	}
	key := func(id string) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(self))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(id))
		return h.Sum64()
	}
	sort.SliceStable(peers, func(i, j int) bool {
		ki, kj := key(peers[i].ID), key(peers[j].ID)
		if ki != kj {
			return ki < kj
		}
		return peers[i].ID < peers[j].ID
	})
}

func gvrString(gvr schema.GroupVersionResource) string {
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
