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
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Snapshot is everything a routing decision reads, as one server (Self)
// knows it at one moment. It is immutable: the filter swaps in a new one
// when any part changes, and RouteReview builds one from the extension's
// last view, so both decide with the same functions on the same kind of
// input.
type Snapshot struct {
	// Self is the receiving server's ID ("" for a server that is none of
	// the peers: RouteReview without a sourcePeer).
	Self string
	// Table is peerdiscovery's view: routing tables and APIServerPeers.
	// nil while the view is not synced.
	Table *Table
	// ViewStale is true while the view's source cannot be read (every
	// peerdiscovery-apiserver replica down, say): its judgments of
	// readiness may be older than the registration Leases.
	ViewStale bool
	// ViewRegistered is true while peerdiscovery's APIService exists: a
	// view is expected (DecideRoot). Without it the cluster runs without
	// peerdiscovery (not installed yet, or removed).
	ViewRegistered bool
	// Records are the registration Leases as Self reads them (its own
	// watch cache in the filter). nil: none known.
	Records Records
	// Local is what Self serves itself; nil while not known.
	Local Local
	// SyncGraceUntil is when the sync grace ends: until then, while
	// Table is nil, a resource Self does not serve gets 503 rather than
	// its own chain's 404 (zero: no grace).
	SyncGraceUntil time.Time
}

// As is the view as server self sees it, serving what local says: how
// RouteReview, the status matrix and the drain what-if decide for a server
// from outside it.
func (s *Snapshot) As(self string, local Local) *Snapshot {
	out := *s
	out.Self, out.Local = self, local
	return &out
}

// Served is the set of resources one server serves; immutable.
type Served struct {
	gvrs map[schema.GroupVersionResource]struct{}
	gvs  map[schema.GroupVersion]struct{}
}

// NewServed builds the set of gvrs.
func NewServed(gvrs []schema.GroupVersionResource) *Served {
	s := &Served{gvrs: make(map[schema.GroupVersionResource]struct{}, len(gvrs)), gvs: map[schema.GroupVersion]struct{}{}}
	for _, r := range gvrs {
		s.gvrs[r] = struct{}{}
		s.gvs[r.GroupVersion()] = struct{}{}
	}
	return s
}

// Serves implements Local; it does not allocate. A nil set serves nothing.
func (s *Served) Serves(gvr schema.GroupVersionResource) bool {
	if s == nil {
		return false
	}
	_, ok := s.gvrs[gvr]
	return ok
}

// ServesGroupVersion tells whether any resource of gv is served.
func (s *Served) ServesGroupVersion(gv schema.GroupVersion) bool {
	if s == nil {
		return false
	}
	_, ok := s.gvs[gv]
	return ok
}

// ServesGroup tells whether any resource of group is served.
func (s *Served) ServesGroup(group string) bool {
	if s == nil {
		return false
	}
	for gv := range s.gvs {
		if gv.Group == group {
			return true
		}
	}
	return false
}

// GroupVersions lists the served group-versions of group, lowest version
// string first.
func (s *Served) GroupVersions(group string) []schema.GroupVersion {
	if s == nil {
		return nil
	}
	var out []schema.GroupVersion
	for gv := range s.gvs {
		if gv.Group == group {
			out = append(out, gv)
		}
	}
	sortGroupVersions(out)
	return out
}

// Record is what one server's registration Lease says.
type Record struct {
	ID       string
	Endpoint string
	// RenewTime is the last renewal, by the server's own clock; Expires is
	// when it lapses unless renewed again.
	RenewTime, Expires time.Time
	// Departed is true once the server recorded a graceful shutdown, at
	// DepartedAt.
	Departed   bool
	DepartedAt time.Time
	// Served is what the Lease records the server serves (nil: it does
	// not say).
	Served *Served
}

// Live tells whether the Lease says its server runs at now.
func (r *Record) Live(now time.Time) bool {
	return !r.Departed && !now.After(r.Expires)
}

// goneForGood tells whether the Lease records a departure, or lapsed more
// than RecoveryWindow before now: the server is not expected back within
// seconds.
func (r *Record) goneForGood(now time.Time) bool {
	if r.Live(now) {
		return false
	}
	gone := r.Expires
	if r.Departed && r.DepartedAt.Before(gone) {
		gone = r.DepartedAt
	}
	return !Recovering(r.Departed, gone, now)
}

// Records are the registration Leases by server ID; immutable once built.
type Records map[string]*Record

// GoneForGood tells whether server id's registration Lease records a
// departure, or lapsed more than RecoveryWindow before now. A server
// without one is not known to be gone.
func (s *Snapshot) GoneForGood(id string, now time.Time) bool {
	r, ok := s.Records[id]
	return ok && r.goneForGood(now)
}

// vouched tells whether server id's registration Lease, live at now and
// recording gvr, makes it a candidate: the view has no APIServerPeer for
// it, or says it is ready, or saw it stop being ready before the Lease's
// last renewal while the view is stale (every extension replica down
// while it came back from a freeze, say) or its verdict was that the
// Lease lapsed (the view's own Lease watch may have been stuck, on a
// kube-apiserver that restarted: this server's renewal is the newer
// word). A live view re-reads a server that is not ready every second,
// so its judgment of a read stands: a server it cannot read (partitioned
// from it, CPU-starved) is not tried from the Lease alone. A server that
// froze stops renewing, so a view that saw the freeze is never overruled
// by the renewals from before it; one that shut down is left to the
// view, which reads it again when it rejoins.
func (s *Snapshot) vouched(id string, gvr schema.GroupVersionResource, now time.Time) (Peer, bool) {
	r, ok := s.Records[id]
	if !ok || !r.Live(now) || !r.Served.Serves(gvr) {
		return Peer{}, false
	}
	out := Peer{ID: id, Endpoint: r.Endpoint, Ready: true}
	p, listed := s.Table.Peer(id)
	switch {
	case !listed:
		return out, true
	case viewReady(p):
		return p, true
	case (s.ViewStale || (p.Left && !p.ShutDown)) && !p.NotReadySince.IsZero() && p.NotReadySince.Before(r.RenewTime):
		out.Endpoint = p.Endpoint
		if r.Endpoint != "" {
			out.Endpoint = r.Endpoint
		}
		return out, true
	}
	return Peer{}, false
}
