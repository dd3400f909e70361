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
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/utils/clock"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// ViewStore owns the in-memory stores of the three computed resources, all
// on one resourceVersion clock, and knows how fresh its content is.
type ViewStore struct {
	peers     *memstore.Store
	discovery *memstore.Store
	routes    *memstore.Store
	rvClock   *memstore.Clock

	clock      clock.PassiveClock
	staleAfter time.Duration

	mu sync.RWMutex
	// lastPublish is the last view published (leading) or the last word
	// from the leader (following): what readiness measures.
	lastPublish time.Time
	// table decides RouteReviews: built at Publish while leading, from the
	// replicated objects (at tableRV) while following.
	table   *routing.Table
	tableRV uint64
	// pending is the engine's latest view while this replica follows: it
	// is published the moment the replica leads.
	pending *compute.Output

	// routable caches which peers are ready proxy targets, by server ID,
	// as of the peers store at routableRV: routing tables are completed
	// from it at read time (decorateRoute).
	routableMu sync.Mutex
	routable   map[string]bool
	routableRV uint64
}

// NewViewStore makes empty stores. A view older than staleAfter makes the
// server unready. A standby store (one replica of several) publishes only
// after Lead and otherwise serves what its leader replicates into Clock();
// a store that is not standby leads from the start (a single replica).
func NewViewStore(staleAfter time.Duration, clk clock.PassiveClock, standby bool) *ViewStore {
	rvClock := memstore.NewClock()
	if standby {
		rvClock = memstore.NewStandbyClock()
	}
	registerMetrics()
	v := &ViewStore{clock: clk, staleAfter: staleAfter, rvClock: rvClock}
	v.peers = memstore.New(memstore.Config{
		Resource: peersResource, Clock: rvClock, AttrFunc: peerAttrs,
		NewFunc: func() runtime.Object { return &api.APIServerPeer{} }, NewListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
	})
	v.discovery = memstore.New(memstore.Config{
		Resource: api.Resource("peeraggregateddiscoveries"), Clock: rvClock, AttrFunc: nameOnlyAttrs,
		NewFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, NewListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
	})
	v.routes = memstore.New(memstore.Config{
		Resource: api.Resource("peerroutingtables"), Clock: rvClock, AttrFunc: routingTableAttrs, Decorate: v.decorateRoute,
		NewFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, NewListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
	})
	return v
}

// Publish implements the peer engine's Publisher: it converts one complete
// computed state of the control plane to internal objects and replaces each
// store's content; the stores emit watch events for what changed. While
// this replica follows, the view is only kept for when it leads.
func (v *ViewStore) Publish(view compute.Output) error {
	if !v.rvClock.Leading() {
		v.mu.Lock()
		v.pending = &view
		v.mu.Unlock()
		return nil
	}
	return v.publish(view)
}

func (v *ViewStore) publish(view compute.Output) error {
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
		stripReadiness(out)
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
	v.routes.Replace(routes)
	v.discovery.Replace(discovery)
	v.peers.Replace(peers)

	table := routing.NewTableFromObjects(view.Routes, view.Peers)

	v.mu.Lock()
	v.table = table
	v.lastPublish = v.clock.Now()
	markViewUpdated(v.lastPublish)
	v.mu.Unlock()
	return nil
}

// lastPublished is when the last view was published (zero: never).
func (v *ViewStore) lastPublished() time.Time {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.lastPublish
}

// RoutingTable returns the decision table of the last published (or, on a
// follower, replicated) view and whether there is one.
func (v *ViewStore) RoutingTable() (*routing.Table, bool) {
	if v.rvClock.Leading() {
		v.mu.RLock()
		defer v.mu.RUnlock()
		return v.table, !v.lastPublish.IsZero()
	}
	cur := v.rvClock.Current()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.lastPublish.IsZero() {
		return nil, false
	}
	if v.table == nil || v.tableRV != cur {
		table, err := v.replicatedTable()
		if err != nil {
			utilruntime.HandleError(err)
			return v.table, v.table != nil
		}
		v.table, v.tableRV = table, cur
	}
	return v.table, true
}

// replicatedTable builds the decision table from the stores, so that a
// follower reviews routes exactly as its leader published them.
func (v *ViewStore) replicatedTable() (*routing.Table, error) {
	ctx := context.Background()
	rl, err := v.routes.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	pl, err := v.peers.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	internalRoutes := rl.(*api.PeerRoutingTableList).Items
	routes := make([]v1alpha1.PeerRoutingTable, len(internalRoutes))
	for i := range internalRoutes {
		if err := v1alpha1.Convert_peerdiscovery_PeerRoutingTable_To_v1alpha1_PeerRoutingTable(&internalRoutes[i], &routes[i], nil); err != nil {
			return nil, fmt.Errorf("converting PeerRoutingTable %q: %w", internalRoutes[i].Name, err)
		}
	}
	internalPeers := pl.(*api.APIServerPeerList).Items
	peers := make([]v1alpha1.APIServerPeer, len(internalPeers))
	for i := range internalPeers {
		if err := v1alpha1.Convert_peerdiscovery_APIServerPeer_To_v1alpha1_APIServerPeer(&internalPeers[i], &peers[i], nil); err != nil {
			return nil, fmt.Errorf("converting APIServerPeer %q: %w", internalPeers[i].Name, err)
		}
	}
	return routing.NewTableFromObjects(routes, peers), nil
}

// Clock is the resourceVersion clock of the three stores: what replication
// snapshots and subscribes to on a leader and restores and applies on a
// follower.
func (v *ViewStore) Clock() *memstore.Clock { return v.rvClock }

// HasState reports whether the stores hold a state: published here, or
// received from a leader. A standby store has none until then.
func (v *ViewStore) HasState() bool { return v.rvClock.Current() != 0 }

// Leading reports whether this replica publishes its own views.
func (v *ViewStore) Leading() bool { return v.rvClock.Leading() }

// Lead makes this replica the publisher: a new epoch of resourceVersions
// continuing the replicated timeline, then the engine's latest view.
func (v *ViewStore) Lead() error {
	v.rvClock.Promote()
	v.mu.Lock()
	pending := v.pending
	v.pending = nil
	v.table = nil
	v.mu.Unlock()
	if pending == nil {
		return nil
	}
	return v.publish(*pending)
}

// Demote stops publishing: the engine's views are kept aside until this
// replica leads again, and the stores wait for the new leader's snapshot.
func (v *ViewStore) Demote() { v.rvClock.Demote() }

// MarkReplicated records word from the leader (a snapshot, a change or a
// progress heartbeat): while following, that is what keeps the replica ready.
func (v *ViewStore) MarkReplicated() {
	v.mu.Lock()
	v.lastPublish = v.clock.Now()
	markViewUpdated(v.lastPublish)
	v.mu.Unlock()
}

// Readiness is not stored in routing tables. A peer turning NotReady and
// back would otherwise rewrite every table naming it (thousands of events
// that flush the watch history and make every filter relist) where one
// APIServerPeer changes. The stored tables carry membership only; reads
// complete status.readyPeers and status.peers[].ready from the peers as
// they are at read time. The filter and RouteReview take readiness from
// the APIServerPeers, as before.
func stripReadiness(t *api.PeerRoutingTable) {
	t.Status.ReadyPeers = 0
	if len(t.Status.Peers) == 0 {
		return
	}
	// The converted slice may share memory with the engine's view.
	peers := make([]api.RoutingPeer, len(t.Status.Peers))
	copy(peers, t.Status.Peers)
	for i := range peers {
		peers[i].Ready = false
	}
	t.Status.Peers = peers
}

// decorateRoute completes a private copy of a stored routing table with the
// readiness of its peers now.
func (v *ViewStore) decorateRoute(obj runtime.Object) {
	t, ok := obj.(*api.PeerRoutingTable)
	if !ok {
		return
	}
	routable := v.routablePeers()
	t.Status.ReadyPeers = 0
	for i := range t.Status.Peers {
		p := &t.Status.Peers[i]
		p.Ready = v1alpha1.PeerReady(routable[p.ServerID], p.Left)
		if p.Ready {
			t.Status.ReadyPeers++
		}
	}
}

// routablePeers returns the ready proxy targets by server ID, rebuilt when
// the peers store changed.
func (v *ViewStore) routablePeers() map[string]bool {
	rv := v.peers.ResourceVersion()
	v.routableMu.Lock()
	defer v.routableMu.Unlock()
	if v.routable != nil && v.routableRV == rv {
		return v.routable
	}
	l, err := v.peers.List(context.Background(), nil)
	if err != nil {
		// No state yet (a standby replica): nothing is ready.
		return map[string]bool{}
	}
	items := l.(*api.APIServerPeerList).Items
	m := make(map[string]bool, len(items))
	for i := range items {
		m[items[i].Spec.ServerID] = v1alpha1.PeerStatusReady(items[i].Status.Conditions, items[i].Status.LeftTime)
	}
	v.routable, v.routableRV = m, rv
	return m
}

// ReadyzCheck fails until a first view was published and whenever the last
// one is older than staleAfter: a replica serving a frozen view must not
// receive traffic from the aggregator.
func (v *ViewStore) ReadyzCheck() healthz.HealthChecker {
	return healthz.NamedCheck("peerdiscovery-view", func(_ *http.Request) error {
		last := v.lastPublished()
		leading := v.rvClock.Leading()
		switch {
		case last.IsZero() && leading:
			return fmt.Errorf("no view computed yet")
		case last.IsZero():
			return fmt.Errorf("no state received from the leader yet")
		}
		if age := v.clock.Since(last); age > v.staleAfter {
			if !leading {
				return fmt.Errorf("no word from the leader for %s (limit %s)", age.Round(time.Second), v.staleAfter)
			}
			return fmt.Errorf("view is stale: last computed %s ago (limit %s)", age.Round(time.Second), v.staleAfter)
		}
		return nil
	})
}

// Stop ends every watch.
func (v *ViewStore) Stop() {
	v.peers.Stop()
	v.discovery.Stop()
	v.routes.Stop()
}

// PeerUID is the UID the APIServerPeer of this name has in the store (the
// same on every replica): the peer engine's Events name it, so that
// kubectl describe finds them.
func (v *ViewStore) PeerUID(name string) types.UID {
	return memstore.UID(peersResource, name)
}

// peersResource is the resource APIServerPeers are stored under; their UID
// derives from it and the name.
var peersResource = api.Resource("apiserverpeers")

// Storage returns the REST storage of the group's v1alpha1 resources.
func (v *ViewStore) Storage() map[string]rest.Storage {
	return map[string]rest.Storage{
		"apiserverpeers": &readOnlyREST{
			Store: v.peers, TableConvertor: peerTable, singular: "apiserverpeer", shortNames: []string{"asp"},
			newFunc: func() runtime.Object { return &api.APIServerPeer{} }, newListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
		},
		"peeraggregateddiscoveries": &readOnlyREST{
			Store: v.discovery, TableConvertor: discoveryTable, singular: "peeraggregateddiscovery", shortNames: []string{"pad"},
			newFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, newListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
		},
		"peerroutingtables": &readOnlyREST{
			Store: v.routes, TableConvertor: routingTableTable, singular: "peerroutingtable", shortNames: []string{"prt"},
			newFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, newListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
		},
		"routereviews": &routeReviewREST{view: v},
	}
}
