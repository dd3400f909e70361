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

package engine

import (
	"context"
	"net"
	"sort"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// observed is what the API says about one identity now.
type observed struct {
	endpoint, version string
	sources           map[v1alpha1.PeerSource]bool
	// live: a Lease says the server runs. Otherwise it left at goneAt, a
	// time read from its Leases (departure or lapse), so that every
	// replica, whenever it started, gives it the same tombstone.
	live   bool
	goneAt time.Time
	// departed: its registration Lease records a graceful shutdown.
	departed bool
	// served is what the server serves itself as its registration Lease
	// records it (nil when it does not): its routes before this replica
	// has read it, and its tombstone after it is gone.
	served []peerlease.ServedResource
	// etags are the discovery ETags recorded with served (zero: none).
	etags peerlease.DiscoveryETags
	// expires is when a live identity's Leases lapse unless renewed.
	expires time.Time
	// retiredBy is the newer identity registered at the same endpoint.
	retiredBy string
	// acquired and renewed order the identities claiming one endpoint.
	acquired, renewed time.Time
	// fromSlice: only an EndpointSlice lists the server, under its
	// address: no Lease identifies it.
	fromSlice bool
}

// newer orders identities deterministically from their Leases:
// acquireTime, then renewTime, then ID.
func newer(a *observed, aID string, b *observed, bID string) bool {
	if !a.acquired.Equal(b.acquired) {
		return a.acquired.After(b.acquired)
	}
	if !a.renewed.Equal(b.renewed) {
		return a.renewed.After(b.renewed)
	}
	return aID > bID
}

// idLeases are the Leases of one server identity.
type idLeases struct{ reg, ident *peerlease.Registration }

// servedSet is the set of resources of one decoded record: the memo hands
// out the same list while the record is unchanged.
type servedSet struct {
	list []peerlease.ServedResource
	set  *routing.Served
}

// recordRegistrations keeps the registration Leases as routing reads them.
func (e *Engine) recordRegistrations(byID map[string]*idLeases) {
	recs := make(routing.Records, len(byID))
	sets := make(map[string]servedSet, len(byID))
	for id, ls := range byID {
		reg := ls.reg
		if reg == nil {
			continue
		}
		r := &routing.Record{ID: id, Endpoint: reg.Endpoint, RenewTime: reg.RenewTime, Expires: reg.Expires, Departed: reg.Departed(), DepartedAt: reg.DepartedAt}
		if reg.Served != nil {
			prev, ok := e.servedSets[id]
			if !ok || len(prev.list) != len(reg.Served) || (len(reg.Served) > 0 && &prev.list[0] != &reg.Served[0]) {
				gvrs := make([]schema.GroupVersionResource, len(reg.Served))
				for i, sr := range reg.Served {
					gvrs[i] = sr.GroupVersionResource
				}
				prev = servedSet{list: reg.Served, set: routing.NewServed(gvrs)}
			}
			sets[id] = prev
			r.Served = prev.set
		}
		recs[id] = r
	}
	e.records, e.servedSets = recs, sets
}

// observe reads the informer caches into the current membership: every
// identity a Lease names (live or not) and every address of the
// default/kubernetes EndpointSlices no Lease claims.
//
// Leases are judged live or lapsed at judgeAt (lapseJudgeTime), tombstones
// at now.
func (e *Engine) observe(ctx context.Context, now, judgeAt time.Time) map[string]*observed {
	byID := e.readLeases(ctx)
	e.recordRegistrations(byID)
	out := make(map[string]*observed, len(byID))
	for id, ls := range byID {
		out[id] = observeIdentity(ls, judgeAt)
	}
	retireSameEndpoint(out)
	e.addSliceEndpoints(out, e.claimedEndpoints(out, now))
	return out
}

// readLeases groups the registration and identity Leases in the informer's
// cache by server identity. A broken Lease is skipped, and logged once
// while it stays broken the same way.
func (e *Engine) readLeases(ctx context.Context) map[string]*idLeases {
	logger := klog.FromContext(ctx)
	byID := map[string]*idLeases{}
	seenBad := map[string]bool{}
	registrations := map[types.NamespacedName]bool{}
	// served are the served-record Leases' records by server ID: they
	// win over a record a registration Lease carries itself.
	served := map[string]peerlease.ServedRecord{}
	bad := func(l *coordinationv1.Lease, err error) {
		key := l.Namespace + "/" + l.Name
		seenBad[key] = true
		if e.badLeases[key] != err.Error() {
			logger.Info("Ignoring a broken peer lease", "lease", key, "err", err)
			e.badLeases[key] = err.Error()
		}
	}
	for _, obj := range e.leases.GetStore().List() {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		if peerlease.IsServedRecord(l) {
			registrations[types.NamespacedName{Namespace: l.Namespace, Name: l.Name}] = true
			rec, err := e.servedMemo.ParseServedRecord(l)
			if err != nil {
				bad(l, err)
				continue
			}
			served[rec.ServerID] = rec
			continue
		}
		reg, isReg, isPeer, err := e.parseLease(l)
		if isReg {
			registrations[types.NamespacedName{Namespace: l.Namespace, Name: l.Name}] = true
		}
		if !isPeer {
			continue
		}
		if err != nil {
			bad(l, err)
			continue
		}
		ls := byID[reg.ServerID]
		if ls == nil {
			ls = &idLeases{}
			byID[reg.ServerID] = ls
		}
		if isReg {
			ls.reg = &reg
		} else {
			ls.ident = &reg
		}
	}
	for id, rec := range served {
		if ls := byID[id]; ls != nil && ls.reg != nil {
			reg := *ls.reg
			reg.Served, reg.ETags = rec.Served, rec.ETags
			ls.reg = &reg
		}
	}
	for key := range e.badLeases {
		if !seenBad[key] {
			delete(e.badLeases, key)
		}
	}
	e.servedMemo.Retain(func(namespace, name string) bool {
		return registrations[types.NamespacedName{Namespace: namespace, Name: name}]
	})
	return byID
}

// parseLease parses a registration or identity Lease; isPeer is false for
// any other Lease.
func (e *Engine) parseLease(l *coordinationv1.Lease) (reg peerlease.Registration, isReg, isPeer bool, err error) {
	switch {
	case peerlease.IsRegistration(l):
		reg, err = e.servedMemo.ParseRegistration(l)
		return reg, true, true, err
	case peerlease.IsIdentity(l):
		if _, has := l.Annotations[peerlease.PeerAdvertiseAddressAnnotation]; !has {
			return reg, false, false, nil // upstream's gate is off: this lease names no endpoint.
		}
		reg, err = peerlease.ParseIdentity(l, e.opts.IdentityLeaseStaleAfter)
		return reg, false, true, err
	}
	return reg, false, false, nil
}

// observeIdentity is what one identity's Leases say of it at judgeAt.
func observeIdentity(ls *idLeases, judgeAt time.Time) *observed {
	o := &observed{sources: map[v1alpha1.PeerSource]bool{}}
	// A recorded departure wins over an identity Lease that upstream
	// keeps renewing until the process exits.
	o.departed = ls.reg != nil && ls.reg.Departed()
	// A registration Lease's endpoint wins over an identity Lease's (the
	// registration comes last).
	o.take(ls.ident, v1alpha1.PeerSourceIdentityLease, judgeAt)
	o.take(ls.reg, v1alpha1.PeerSourceRegistrationLease, judgeAt)
	if ls.reg != nil {
		o.served, o.etags = ls.reg.Served, ls.reg.ETags
	}
	if o.departed {
		o.goneAt = ls.reg.GoneAt()
	}
	if o.live {
		o.goneAt = time.Time{}
		for _, r := range []*peerlease.Registration{ls.ident, ls.reg} {
			if r != nil && r.Live(judgeAt) && r.Expires.After(o.expires) {
				o.expires = r.Expires
			}
		}
	}
	return o
}

// take adds what one of the identity's Leases (nil: none) says: once a
// live Lease was seen, non-live ones say nothing more.
func (o *observed) take(r *peerlease.Registration, src v1alpha1.PeerSource, judgeAt time.Time) {
	if r == nil {
		return
	}
	if r.AcquireTime.After(o.acquired) {
		o.acquired = r.AcquireTime
	}
	if r.RenewTime.After(o.renewed) {
		o.renewed = r.RenewTime
	}
	if !o.departed && r.Live(judgeAt) {
		if !o.live {
			// The first live Lease seen replaces what non-live ones said.
			o.live = true
			clear(o.sources)
		}
	} else if o.live {
		return
	}
	o.endpoint = r.Endpoint
	if r.BinaryVersion != "" {
		o.version = r.BinaryVersion
	}
	o.sources[src] = true
	if gone := r.GoneAt(); gone.After(o.goneAt) {
		o.goneAt = gone
	}
}

// retireSameEndpoint retires, at once, the older identities at an endpoint
// where a newer one registered: the server restarted under a new ID, so
// the old one's APIs are not unavailable, they are served (or not) by its
// successor. A live identity is retired only by a newer live one.
func retireSameEndpoint(out map[string]*observed) {
	byEndpoint := map[string][]string{}
	for id, o := range out {
		byEndpoint[o.endpoint] = append(byEndpoint[o.endpoint], id)
	}
	for _, ids := range byEndpoint {
		if len(ids) < 2 {
			continue
		}
		// Live first: a departed or lapsed identity never outranks the one
		// serving there now (a server renamed and renamed back).
		sort.Slice(ids, func(i, j int) bool {
			a, b := out[ids[i]], out[ids[j]]
			if a.live != b.live {
				return a.live
			}
			return newer(a, ids[i], b, ids[j])
		})
		for i, id := range ids {
			o := out[id]
			for _, by := range ids[:i] {
				if out[by].live || !o.live {
					o.retiredBy = by
					break
				}
			}
		}
	}
}

// claimedEndpoints maps the endpoints identities hold to them: a live
// one's, and a gone one's while its tombstone lasts.
func (e *Engine) claimedEndpoints(out map[string]*observed, now time.Time) map[string]string {
	claimed := map[string]string{}
	for id, o := range out {
		if o.live && o.retiredBy == "" {
			claimed[o.endpoint] = id
		}
	}
	// An identity that left keeps its address while its tombstone lasts:
	// the EndpointSlice lists a server a little longer than its Lease says
	// it runs (its endpoint is removed later in its shutdown), and that
	// address is the server that left, not a new peer with a tombstone of
	// its own that only this replica would know.
	for id, o := range out {
		if _, taken := claimed[o.endpoint]; !taken && !o.live && o.retiredBy == "" && now.Before(o.goneAt.Add(e.opts.TombstonePeriod)) {
			claimed[o.endpoint] = id
		}
	}
	return claimed
}

// addSliceEndpoints adds the default/kubernetes EndpointSlices' addresses:
// a source of the live identity that claims one, else a peer of its own.
func (e *Engine) addSliceEndpoints(out map[string]*observed, claimed map[string]string) {
	for _, obj := range e.slices.GetStore().List() {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, ep := range sliceEndpoints(s) {
			if id, ok := claimed[ep]; ok {
				if out[id].live {
					out[id].sources[v1alpha1.PeerSourceEndpointSlice] = true
				}
				continue
			}
			// An address is never a Lease's ID (IDs have no ':'), so an
			// unclaimed one is its own peer.
			o := out[ep]
			if o == nil {
				o = &observed{endpoint: ep, sources: map[v1alpha1.PeerSource]bool{}, live: true, fromSlice: true}
				out[ep] = o
			}
			o.sources[v1alpha1.PeerSourceEndpointSlice] = true
		}
	}
}

// sliceEndpoints lists the ready host:port pairs of the https port.
func sliceEndpoints(s *discoveryv1.EndpointSlice) []string {
	var port int32
	for _, p := range s.Ports {
		if p.Port != nil && (p.Name == nil || *p.Name == "https" || *p.Name == "") {
			port = *p.Port
			break
		}
	}
	if port == 0 {
		return nil
	}
	var out []string
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		for _, a := range ep.Addresses {
			ip := net.ParseIP(a)
			if ip == nil {
				continue
			}
			// Canonical, as peerlease.ValidateEndpoint makes lease endpoints.
			out = append(out, net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		}
	}
	return out
}
