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
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// Request is what the decision needs to know about one request.
type Request struct {
	// IsResourceRequest is false for /healthz, /version, discovery, ...
	IsResourceRequest bool
	GVR               schema.GroupVersionResource
	// AlreadyProxied is true when a peer already proxied the request here
	// (x-kubernetes-peer-proxied); such a request is never proxied again.
	AlreadyProxied bool
}

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

// viewReady tells whether the view says p is ready now.
func viewReady(p Peer) bool { return p.Ready && !p.Left }

// StillCandidate tells whether a candidate of an earlier decision may
// still be tried at now: the view says it is ready, or its registration
// Lease vouches for it (vouched) for gvr. The filter asks before each
// attempt, so a peer that stopped since the decision is skipped.
func (s *Snapshot) StillCandidate(p Peer, gvr schema.GroupVersionResource, now time.Time) bool {
	if v, ok := s.Table.Peer(p.ID); ok && viewReady(v) {
		return true
	} else if !ok && s.Records[p.ID] == nil {
		// Known to neither: only the decision named it (a test's
		// candidate, a route without APIServerPeers); nothing says it
		// stopped.
		return true
	}
	_, ok := s.vouched(p.ID, gvr, now)
	return ok
}
