// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//	http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.
// Package views is what the filter knows, each view from its own source,
// and the routing.Snapshot every decision reads, published from them:
//
//   - routes.go: informers on the peerdiscovery.k8s.io objects
//     (PeerRoutingTable, APIServerPeer, PeerAggregatedDiscovery) through a
//     plain REST client, and the routing table built from them;
//   - leases.go: the registration Leases, from this server's own watch
//     cache;
//   - local.go: this server's own (profile=nopeer) discovery; served.go:
//     the served record of its registration Lease, from it;
//   - views.go: the three together and the snapshot.
//
// Each view swaps in immutable state and then publishes the snapshot, so a
// request reads one pointer: one consistent state, no allocation.
package views

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Views are the filter's views and the snapshot published from them.
type Views struct {
	Routes *Routes
	Leases *Leases
	Local  *Local

	current atomic.Pointer[routing.Snapshot]
	// deadline is the sync grace's end; nil before the post-start hook.
	deadline atomic.Pointer[time.Time]

	// mu serializes publish: the last build reads every view's latest
	// state, whichever view changed last.
	mu   sync.Mutex
	self string
}

// Config is what the views take from the filter.
type Config struct {
	// Now is the filter's clock (the registration Leases' liveness).
	Now func() time.Time
	// OnPeerStopped, when set, is called for each peer the routes view
	// stops marking ready, once the snapshot that says so is in use.
	OnPeerStopped func(id string)
}

// New makes the views, empty until Start; the snapshot is published from
// now on, whenever one of them changes.
func New(c Config) *Views {
	v := &Views{Routes: newRoutes(), Leases: newLeases(c.Now), Local: newLocal()}
	v.Routes.onPeerStopped = c.OnPeerStopped
	v.Routes.onChange, v.Leases.onChange, v.Local.onChange = v.publish, v.publish, v.publish
	v.publish()
	return v
}

// Start starts the views over the loopback client: the local discovery
// first (its first read is bounded, and made before the hook returns),
// then the routes and the registration Leases.
func (v *Views) Start(ctx context.Context, loopback *rest.Config, localRefresh time.Duration) error {
	if err := v.Local.Start(ctx, loopback, localRefresh); err != nil {
		return err
	}
	if err := v.Routes.Start(ctx, loopback); err != nil {
		return err
	}
	return v.Leases.Start(ctx, loopback)
}

// Snapshot is the current snapshot; read only.
func (v *Views) Snapshot() *routing.Snapshot { return v.current.Load() }

// Published is where the snapshot is swapped in: the request path loads
// it directly (the handler and the proxy), and only the views store it.
func (v *Views) Published() *atomic.Pointer[routing.Snapshot] { return &v.current }

// Synced tells whether both the local discovery and the routing caches
// are filled: the snapshot has both.
func (v *Views) Synced() bool {
	s := v.Snapshot()
	return s.Local != nil && s.Table != nil
}

// SetSelf names this server in the snapshot (the aggregator's config gives
// it, before the first request).
func (v *Views) SetSelf(id string) {
	v.mu.Lock()
	v.self = id
	v.mu.Unlock()
	v.publish()
}

// SetSyncDeadline records when the sync grace ends (nil: not started).
func (v *Views) SetSyncDeadline(d *time.Time) {
	v.deadline.Store(d)
	v.publish()
}

// SyncDeadline is when the sync grace ends; nil before it was set.
func (v *Views) SyncDeadline() *time.Time { return v.deadline.Load() }

// publish builds the snapshot of the views' current state and swaps it in.
func (v *Views) publish() {
	v.mu.Lock()
	defer v.mu.Unlock()
	routes := v.Routes.Current()
	snap := &routing.Snapshot{Self: v.self, ViewStale: routes.Stale, ViewRegistered: v.Local.ViewRegistered(), Records: v.Leases.Records()}
	if routes.Synced {
		snap.Table = routes.Table
	}
	if d := v.Local.Current(); d != nil {
		snap.Local = d
	}
	if d := v.deadline.Load(); d != nil {
		snap.SyncGraceUntil = *d
	}
	v.current.Store(snap)
}
