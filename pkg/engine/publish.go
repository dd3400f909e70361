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
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

// Publisher receives the engine's views. The engine publishes when its
// input changed, and at least every half refresh interval even when
// nothing changed: that heartbeat is what keeps peerdiscovery-apiserver
// ready. Each view replaces everything before it.
type Publisher interface {
	Publish(compute.Output) error
}

// publish computes the view from every peer's state and hands it over,
// unless the input is the last published one and that is younger than
// half a refresh interval. A loop turn follows every Lease renewal (each
// server's, every few seconds) and mostly changes nothing; recomputing and
// republishing thousands of objects for it was most of the engine's CPU.
func (e *Engine) publish() error {
	in := compute.Input{ClusterWide: e.lastClusterWide}
	for _, p := range e.peers {
		in.Peers = append(in.Peers, p.Peer)
	}
	slices.SortFunc(in.Peers, func(a, b compute.Peer) int { return strings.Compare(a.ServerID, b.ServerID) })
	now := e.clock.Now()
	if last := e.lastInput; last != nil && now.Sub(last.at) < e.opts.RefreshInterval/2 && last.same(in.Peers, e.lastClusterWide, e.deletedGVs) {
		publishDecisions.WithLabelValues("unchanged").Inc()
		return nil
	}
	publishDecisions.WithLabelValues("published").Inc()
	if len(e.deletedGVs) > 0 {
		deleted := e.deletedGVs
		in.Excluded = func(g, v string) bool { return deleted[schema.GroupVersion{Group: g, Version: v}] }
	}
	ready, notReady, left := 0, 0, 0
	for _, p := range in.Peers {
		switch {
		case p.Left:
			left++
		case p.Ready:
			ready++
		default:
			notReady++
		}
	}
	peersGauge.WithLabelValues("ready").Set(float64(ready))
	peersGauge.WithLabelValues("not_ready").Set(float64(notReady))
	peersGauge.WithLabelValues("left").Set(float64(left))
	start := time.Now()
	out, err := compute.Compute(in)
	computeDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	routable := make(map[string]bool, len(in.Peers))
	for _, p := range in.Peers {
		routable[p.ServerID] = v1alpha1.PeerReady(p.Ready, p.Left)
	}
	notAll, unavailable := 0, 0
	for i := range out.Routes {
		st := &out.Routes[i].Status
		if !st.ServedByAll {
			notAll++
		}
		if !slices.ContainsFunc(st.Peers, func(p v1alpha1.RoutingPeer) bool { return routable[p.ServerID] }) {
			unavailable++
		}
	}
	routesGauge.WithLabelValues("all").Set(float64(len(out.Routes)))
	routesGauge.WithLabelValues("not_served_by_all").Set(float64(notAll))
	routesGauge.WithLabelValues("unavailable").Set(float64(unavailable))
	out.Records = e.records
	if err := e.publisher.Publish(out); err != nil {
		return err
	}
	e.lastInput = &publishedInput{peers: in.Peers, clusterWide: maps.Clone(e.lastClusterWide), deleted: maps.Clone(e.deletedGVs), at: now}
	return nil
}

// publishedInput is the input of the last published view, and when it was
// published.
type publishedInput struct {
	// peers are sorted by server ID.
	peers       []compute.Peer
	clusterWide map[schema.GroupVersion]string
	deleted     map[schema.GroupVersion]bool
	at          time.Time
}

// same tells whether an input equals this one.
func (i *publishedInput) same(peers []compute.Peer, clusterWide map[schema.GroupVersion]string, deleted map[schema.GroupVersion]bool) bool {
	return slices.EqualFunc(i.peers, peers, samePeer) && maps.Equal(i.clusterWide, clusterWide) && maps.Equal(i.deleted, deleted)
}

// samePeer compares every field of two peers; their documents by identity:
// the engine replaces a peer's documents and never changes one in place
// (useRecordedList keeps a recorded list's documents while the list is
// the same), so the same array is the same document, and comparing
// thousands of resources by value on every loop turn is what skipping is
// meant to save.
func samePeer(a, b compute.Peer) bool {
	if !sameDocument(a.API, b.API) || !sameDocument(a.APIs, b.APIs) {
		return false
	}
	a.API, a.APIs, b.API, b.APIs = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

func sameDocument(a, b []apidiscoveryv2.APIGroupDiscovery) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
