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

package filter

import (
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// snapshots publishes the routing.Snapshot every decision of this filter
// reads, built from the views (routing tables, registration Leases, local
// discovery, sync state). Each view swaps in immutable state and then
// calls publish, which builds the snapshot from every view's current state
// and swaps it in whole: a request reads one pointer, so it is decided on
// one consistent state at no cost, and the proxy reads the latest before
// each attempt the same way, without calling back into the filter.
type snapshots struct {
	current atomic.Pointer[routing.Snapshot]

	// mu serializes publish: the last build reads every view's latest
	// state, whichever view changed last.
	mu       sync.Mutex
	self     string
	routes   *routingState
	leases   *leaseRecords
	local    *localDiscovery
	deadline *atomic.Pointer[time.Time]
}

// newSnapshots publishes the views' snapshot from now on, whenever one of
// them changes.
func newSnapshots(routes *routingState, leases *leaseRecords, local *localDiscovery, deadline *atomic.Pointer[time.Time]) *snapshots {
	s := &snapshots{routes: routes, leases: leases, local: local, deadline: deadline}
	routes.onChange, leases.onChange, local.onChange = s.publish, s.publish, s.publish
	s.publish()
	return s
}

// Snapshot is the current snapshot; read only.
func (s *snapshots) Snapshot() *routing.Snapshot { return s.current.Load() }

// setSelf names this server in the snapshot (the aggregator's config gives
// it, before the first request).
func (s *snapshots) setSelf(id string) {
	s.mu.Lock()
	s.self = id
	s.mu.Unlock()
	s.publish()
}

// publish builds the snapshot of the views' current state and swaps it in.
func (s *snapshots) publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	routes := s.routes.value()
	snap := &routing.Snapshot{Self: s.self, ViewStale: routes.stale, Records: *s.leases.current.Load()}
	if routes.synced {
		snap.Table = routes.table
	}
	if d := s.local.current(); d != nil {
		snap.Local = d
	}
	if d := s.deadline.Load(); d != nil {
		snap.SyncGraceUntil = *d
	}
	s.current.Store(snap)
}

// setSyncDeadline records when the sync grace ends (nil: not started).
func (f *Filter) setSyncDeadline(d *time.Time) {
	f.syncDeadline.Store(d)
	f.snaps.publish()
}
