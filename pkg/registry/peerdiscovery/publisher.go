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

package peerdiscovery

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Publisher implements the peer engine's Publisher: each computed view
// replaces the stores' content, and its routing table and peers are kept
// for what decides from the view (RouteReview, the READY column).
type Publisher struct {
	stores *Stores
	clock  clock.PassiveClock
	last   atomic.Pointer[published]
}

// published is what the last view decides from, and when it came.
type published struct {
	at time.Time
	// view is what decisions read: the routing table and the
	// registration Leases the view was computed from.
	view *routing.Snapshot
	// peers are sorted by server ID.
	peers []v1alpha1.APIServerPeer
}

// NewPublisher publishes into stores; clk dates each view.
func NewPublisher(stores *Stores, clk clock.PassiveClock) *Publisher {
	registerMetrics()
	return &Publisher{stores: stores, clock: clk}
}

// Publish converts one complete computed state of the control plane to
// internal objects and replaces each store's content; the stores emit
// watch events for what changed. An error leaves the previous view in
// place (only a store that accepted its part changed).
func (p *Publisher) Publish(view compute.Output) error {
	peers := make([]runtime.Object, 0, len(view.Peers))
	for i := range view.Peers {
		out := &api.APIServerPeer{}
		if err := v1alpha1.Convert_v1alpha1_APIServerPeer_To_peerdiscovery_APIServerPeer(&view.Peers[i], out, nil); err != nil {
			return fmt.Errorf("converting APIServerPeer %q: %w", view.Peers[i].Name, err)
		}
		peers = append(peers, out)
	}
	routes := make([]runtime.Object, 0, len(view.Routes))
	for i := range view.Routes {
		out := &api.PeerRoutingTable{}
		if err := v1alpha1.Convert_v1alpha1_PeerRoutingTable_To_peerdiscovery_PeerRoutingTable(&view.Routes[i], out, nil); err != nil {
			return fmt.Errorf("converting PeerRoutingTable %q: %w", view.Routes[i].Name, err)
		}
		routes = append(routes, out)
	}
	var discovery []runtime.Object
	if view.Discovery != nil {
		out := &api.PeerAggregatedDiscovery{}
		if err := v1alpha1.Convert_v1alpha1_PeerAggregatedDiscovery_To_peerdiscovery_PeerAggregatedDiscovery(view.Discovery, out, nil); err != nil {
			return fmt.Errorf("converting PeerAggregatedDiscovery: %w", err)
		}
		discovery = append(discovery, out)
	}
	// Routes first, peers last: a watcher that sees a new peer can already
	// find the routes that name it.
	if err := p.stores.Routes.Replace(routes); err != nil {
		return err
	}
	if err := p.stores.Discovery.Replace(discovery); err != nil {
		return err
	}
	if err := p.stores.Peers.Replace(peers); err != nil {
		return err
	}

	sorted := slices.Clone(view.Peers)
	slices.SortFunc(sorted, func(a, b v1alpha1.APIServerPeer) int { return strings.Compare(a.Spec.ServerID, b.Spec.ServerID) })
	table := routing.NewTableFromObjects(view.Routes, view.Peers)
	last := &published{at: p.clock.Now(), view: &routing.Snapshot{Table: table, Records: view.Records}, peers: sorted}
	p.last.Store(last)
	markViewUpdated(last.at)
	return nil
}

// Routing returns the decision state (routing table and registration
// Leases) and the APIServerPeers (sorted by server ID) of the last
// published view, and whether there is one. Both are shared: read only.
func (p *Publisher) Routing() (*routing.Snapshot, []v1alpha1.APIServerPeer, bool) {
	last := p.last.Load()
	if last == nil {
		return nil, nil, false
	}
	return last.view, last.peers, true
}

// LastPublished is when the last view was published (zero: never).
func (p *Publisher) LastPublished() time.Time {
	if last := p.last.Load(); last != nil {
		return last.at
	}
	return time.Time{}
}
