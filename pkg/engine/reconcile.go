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
	"slices"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/clusterwide"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// clusterWide is the cluster-wide group-versions of the CRDs and
// APIServices in the informers' caches (pkg/clusterwide owns the rule).
func (e *Engine) clusterWide() map[schema.GroupVersion]string {
	var crds []clusterwide.CRD
	for _, obj := range e.crds.GetStore().List() {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			continue
		}
		c := clusterwide.CRD{Group: crd.Spec.Group, Plural: crd.Spec.Names.Plural, Served: make([]string, 0, len(crd.Spec.Versions))}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				c.Served = append(c.Served, v.Name)
			}
		}
		crds = append(crds, c)
	}
	var apiServices []clusterwide.APIService
	for _, obj := range e.apiservice.GetStore().List() {
		as, ok := obj.(*apiregistrationv1.APIService)
		if !ok {
			continue
		}
		apiServices = append(apiServices, clusterwide.APIService{Group: as.Spec.Group, Version: as.Spec.Version, Service: as.Spec.Service != nil})
	}
	return clusterwide.GroupVersions(crds, apiServices)
}

// reconcile updates membership from the informers and starts reads: of
// new peers, moved peers, peers owed one and, when CRDs or APIServices
// changed, every peer; on a refresh, a heartbeat or a full read
// (fullReadDue) of every other idle peer.
func (e *Engine) reconcile(ctx context.Context, refresh bool) {
	now := e.clock.Now()
	obs := e.observe(ctx, now, e.lapseJudgeTime(now))
	changedCW := e.updateClusterWide()
	e.nextLapse = nextLapse(obs, now)
	for id, o := range obs {
		e.reconcilePeer(ctx, id, o, now, refresh, changedCW)
	}
	e.forgetUnobserved(obs, now)
	e.releaseDeletedGVs()
}

// updateClusterWide reads the cluster-wide group-versions again, marks
// those that went as deleted, and tells whether any changed.
func (e *Engine) updateClusterWide() bool {
	cw := e.clusterWide()
	changed := len(cw) != len(e.lastClusterWide)
	for gv := range e.lastClusterWide {
		if _, still := cw[gv]; !still {
			// Never resurrect a deleted CRD's or APIService's GV from a
			// peer's document that has not caught up yet.
			e.deletedGVs[gv] = true
			changed = true
		}
	}
	for gv := range cw {
		delete(e.deletedGVs, gv)
		if _, had := e.lastClusterWide[gv]; !had {
			changed = true
		}
	}
	e.lastClusterWide = cw
	return changed
}

// nextLapse is when Run wakes to judge the first live Lease that lapses
// unless renewed (zero: none).
func nextLapse(obs map[string]*observed, now time.Time) time.Time {
	var next time.Time
	for _, o := range obs {
		if !o.live || o.retiredBy != "" || o.expires.IsZero() {
			continue
		}
		// A Lease that expired unseen is judged at the latest one Lease
		// duration later (lapseJudgeTime); a Lease event wakes Run sooner.
		wake := o.expires
		if !wake.After(now) {
			wake = wake.Add(maxLapseDelay)
		}
		if next.IsZero() || wake.Before(next) {
			next = wake
		}
	}
	return next
}

// reconcilePeer brings one observed identity's peer up to date and reads
// it in full when it is new, moved, owed a read, or rescrapeAll is set;
// else a refresh checks it.
func (e *Engine) reconcilePeer(ctx context.Context, id string, o *observed, now time.Time, refresh, rescrapeAll bool) {
	p := e.peers[id]
	if o.retiredBy != "" {
		if p != nil {
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonReplaced, "Peer %s retired: %s now registers at %s", id, o.retiredBy, o.endpoint)
		}
		return
	}
	if !o.live {
		e.leftByLease(p, id, o, now)
		return
	}
	p = e.joinedPeer(p, id, o, now)
	p.follow(o)
	// A first read already in flight needs no second one: informer
	// events (the initial list's among them) would otherwise read
	// every new peer twice.
	switch {
	case rescrapeAll || (!p.tried && !p.inflight) || p.again || refresh && e.fullReadDue(p, now):
		e.startScrape(ctx, p)
	case refresh:
		e.startHeartbeat(ctx, p)
	}
}

// joinedPeer is the peer of a live identity: p, rejoined when it had left,
// or a new one.
func (e *Engine) joinedPeer(p *peerState, id string, o *observed, now time.Time) *peerState {
	switch {
	case p == nil:
		p = &peerState{Peer: compute.Peer{ServerID: id, ReadyReason: "Pending", ReadyMessage: "discovery not read yet", ReadyTransition: now}, unidentified: o.fromSlice}
		e.peers[id] = p
		e.event(p, corev1.EventTypeNormal, ReasonJoined, "Peer %s joined at %s", id, o.endpoint)
	case p.Left:
		p.Left, p.LeftTime = false, time.Time{}
		p.setReady(false, "Pending", "rejoined; discovery not read yet", now)
		// Read it now, not at the next refresh.
		p.again = true
		e.event(p, corev1.EventTypeNormal, ReasonJoined, "Peer %s rejoined at %s", id, o.endpoint)
	}
	return p
}

// follow takes what a live identity's Leases and EndpointSlices say of the
// peer: endpoint, version, sources and recorded list.
func (p *peerState) follow(o *observed) {
	if p.Endpoint != o.endpoint {
		p.Endpoint = o.endpoint
		p.again = true
	}
	if o.version != "" && p.BinaryVersion == "" {
		p.BinaryVersion = o.version
	}
	p.Sources = sortedSources(o.sources)
	// Not read yet (this replica started after a crash of every
	// replica, or cannot reach the peer): its routes are what its
	// Lease records, not ready (503) until the first read, never
	// missing (a false 404).
	p.useRecordedList(o.served)
	// The peer's filter records what the peer serves on every renewal
	// (every 5 s) from its own reads: a new list means its discovery
	// changed (a server that just started registers its new groups'
	// APIServices after its first renewal), so read it now rather
	// than at the next refresh, which left a just-upgraded server's new
	// APIs missing (404 through its peers) for up to a refresh interval.
	if !sameServed(p.served, o.served) {
		if p.tried {
			p.again = true
		}
		p.served = o.served
	}
	// New ETags mean its discovery changed, perhaps only in what the list
	// leaves out (CRDs', aggregated APIs' resources): read it unless a
	// read already brought those documents. A read in flight may have
	// been answered before the change, so it is followed by another (the
	// first record a peer is seen with starts no read of its own: its
	// first read is not in flight yet).
	if o.etags != p.etags {
		if (p.tried || p.inflight) && !o.etags.IsZero() && (o.etags.API != p.APIETag || o.etags.APIs != p.APIsETag) {
			p.again = true
		}
		p.etags = o.etags
	}
}

// forgetUnobserved handles the peers no Lease or EndpointSlice names any
// more: renamed, left, or their tombstone over.
func (e *Engine) forgetUnobserved(obs map[string]*observed, now time.Time) {
	byEndpoint := make(map[string]string, len(obs))
	for id, o := range obs {
		if o.live && o.retiredBy == "" {
			byEndpoint[o.endpoint] = id
		}
	}
	for id, p := range e.peers {
		if _, ok := obs[id]; ok {
			continue
		}
		if other, ok := byEndpoint[p.Endpoint]; ok && p.unidentified && !p.Left {
			// A peer known only by its EndpointSlice address now has a lease
			// at that address: the same server under its real ID, not a
			// server that left.
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonRemoved, "Peer %s is now known as %s", id, other)
			continue
		}
		// Its Lease is gone (deleted by a filter of an earlier version, or
		// collected after its tombstone): the time it left is when this
		// replica noticed, unless a Lease already said.
		if !p.Left {
			p.Left, p.LeftTime = true, now
			p.setReady(false, v1alpha1.PeerReasonLeft, "its lease lapsed or was deleted; its APIs answer 503 until the tombstone expires", now)
			e.event(p, corev1.EventTypeWarning, ReasonLeft, "Peer %s left; its APIs stay known as unavailable for %s", id, e.opts.TombstonePeriod)
			continue
		}
		if now.Sub(p.LeftTime) >= e.opts.TombstonePeriod {
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonRemoved, "Peer %s removed: tombstone of %s expired", id, e.opts.TombstonePeriod)
		}
	}
}

// releaseDeletedGVs stops excluding a deleted GV once no document lists
// it and no scrape is in flight: one started before the deletion (a CRD
// created and deleted quickly) may still bring it back.
func (e *Engine) releaseDeletedGVs() {
	if len(e.deletedGVs) == 0 || e.anyInflight() {
		return
	}
	for gv := range e.deletedGVs {
		if !e.anyDocumentHas(gv) {
			delete(e.deletedGVs, gv)
		}
	}
}

func (e *Engine) anyInflight() bool {
	for _, p := range e.peers {
		if p.inflight {
			return true
		}
	}
	return false
}

func (e *Engine) anyDocumentHas(gv schema.GroupVersion) bool {
	for _, p := range e.peers {
		for _, doc := range [][]apidiscoveryv2.APIGroupDiscovery{p.API, p.APIs} {
			for i := range doc {
				if doc[i].Name != gv.Group {
					continue
				}
				for _, v := range doc[i].Versions {
					if v.Version == gv.Version {
						return true
					}
				}
			}
		}
	}
	return false
}

func (p *peerState) setReady(ready bool, reason, msg string, now time.Time) {
	if p.Ready != ready || p.ReadyTransition.IsZero() {
		p.ReadyTransition = now
	}
	p.Ready, p.ReadyReason, p.ReadyMessage = ready, reason, msg
}

func sameServed(a, b []peerlease.ServedResource) bool {
	return slices.EqualFunc(a, b, func(x, y peerlease.ServedResource) bool {
		return x.GroupVersionResource == y.GroupVersionResource && x.Scope == y.Scope && x.Kind == y.Kind && slices.Equal(x.Verbs, y.Verbs)
	})
}
