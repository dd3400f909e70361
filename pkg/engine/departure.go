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
	"slices"
	"sort"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// leftByLease applies what a departed or lapsed Lease says. Everything it
// sets comes from the Lease, so every replica publishes the same peer: the
// time it left, its endpoint, and the resources its tombstone keeps, which
// its filter recorded in the Lease while it ran.
func (e *Engine) leftByLease(p *peerState, id string, o *observed, now time.Time) {
	until := o.goneAt.Add(e.opts.TombstonePeriod)
	if !now.Before(until) {
		if p != nil {
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonRemoved, "Peer %s removed: tombstone of %s expired", id, e.opts.TombstonePeriod)
		}
		return
	}
	if p == nil {
		// Left before this replica knew it (it started later): the
		// transition is no news, so no Event.
		p = &peerState{Peer: compute.Peer{ServerID: id}}
		e.peers[id] = p
	} else if !p.Left {
		how := "its lease lapsed"
		if o.departed {
			how = "it shut down"
		}
		e.event(p, corev1.EventTypeWarning, ReasonLeft, "Peer %s left (%s at %s); its APIs stay known as unavailable until %s",
			id, how, o.goneAt.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	reason, msg := v1alpha1.PeerReasonLeft, "its lease lapsed; its APIs answer 503 until the tombstone expires"
	if o.departed {
		reason, msg = v1alpha1.PeerReasonShutDown, "it shut down; its APIs answer 503 until the tombstone expires"
	}
	p.Left, p.LeftTime = true, o.goneAt
	p.Ready, p.ReadyReason, p.ReadyMessage, p.ReadyTransition = false, reason, msg, o.goneAt
	p.Endpoint = o.endpoint
	if o.version != "" {
		p.BinaryVersion = o.version
	}
	p.Sources = sortedSources(o.sources)
	// A replica that never read the peer (it started later) takes the
	// recorded list; one that read it keeps the full document, which
	// merged discovery lists during the tombstone with verbs and kinds (the
	// list has GVRs and scopes only). Kept if the peer comes back under the
	// same ID, until its first read: its APIs answer 503 meanwhile, not 404.
	if p.useRecordedList(o.served) {
		// Nothing this replica alone knows: a replica that never read the
		// peer publishes the same object.
		p.LastSyncTime, p.LastError, p.Stale = time.Time{}, "", false
	}
}

// useRecordedList makes the resource list a peer's registration Lease
// records its documents, unless this replica has read the peer itself:
// a read document is richer (verbs, kinds) and newer. It reports whether
// the list is in use.
func (p *peerState) useRecordedList(served []peerlease.ServedResource) bool {
	if served == nil || (p.HasDocument && !p.Recorded) {
		return false
	}
	// The same list keeps the same documents: publish skips an input
	// whose documents are the same arrays.
	if p.Recorded && sameServed(p.recordedFrom, served) {
		return true
	}
	p.API, p.APIs = servedDocuments(served)
	p.APIETag, p.APIsETag = "", ""
	p.HasDocument, p.Recorded = true, true
	p.recordedFrom = served
	return true
}

func sortedSources(set map[v1alpha1.PeerSource]bool) []v1alpha1.PeerSource {
	out := make([]v1alpha1.PeerSource, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// servedDocuments turns a server's recorded resource list into the
// documents compute reads: the core group in /api, the rest in /apis, in a
// fixed order. Routing tables need the GVRs and scopes only; merged
// discovery lists them with their kinds and verbs (without subresources,
// short names or categories), which clients need to use them at all.
func servedDocuments(served []peerlease.ServedResource) (api, apis []apidiscoveryv2.APIGroupDiscovery) {
	rs := slices.Clone(served)
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Resource < b.Resource
	})
	var groups []apidiscoveryv2.APIGroupDiscovery
	for _, r := range rs {
		if n := len(groups); n == 0 || groups[n-1].Name != r.Group {
			groups = append(groups, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: r.Group}})
		}
		g := &groups[len(groups)-1]
		if n := len(g.Versions); n == 0 || g.Versions[n-1].Version != r.Version {
			g.Versions = append(g.Versions, apidiscoveryv2.APIVersionDiscovery{Version: r.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
		}
		v := &g.Versions[len(g.Versions)-1]
		res := apidiscoveryv2.APIResourceDiscovery{Resource: r.Resource, Scope: r.Scope, Verbs: r.Verbs}
		if r.Kind != "" {
			res.ResponseKind = &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
		}
		v.Resources = append(v.Resources, res)
	}
	if len(groups) > 0 && groups[0].Name == "" {
		return groups[:1], groups[1:]
	}
	return nil, groups
}
