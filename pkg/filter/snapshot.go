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
	"sync/atomic"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// snapshots keeps the routing.Snapshot every decision of this filter reads,
// built from the views (routing tables, registration Leases, local
// discovery, sync state), each of which swaps in immutable state. A
// snapshot is rebuilt, and swapped in whole, on the first decision after
// any of them changed, so one request is decided on one consistent state
// and a decision costs no allocation while nothing changes.
type snapshots struct {
	current atomic.Pointer[snapshotEntry]
}

// snapshotEntry is a snapshot and the parts it was built from.
type snapshotEntry struct {
	parts snapshotParts
	snap  routing.Snapshot
}

// snapshotParts identify the views' state: each part is an immutable value
// or the pointer to one.
type snapshotParts struct {
	self    string
	table   *routing.Table // nil while not synced
	stale   bool
	records *routing.Records
	local   *localDoc
	// deadline is the sync grace's end; nil before the post-start hook.
	deadline *time.Time
}

// snapshot returns the snapshot of the views' current state; read only.
func (f *Filter) snapshot() *routing.Snapshot {
	p := snapshotParts{self: f.serverID, records: f.leases.current.Load(), local: f.local.current(), deadline: f.syncDeadline.Load(), stale: f.state.stale()}
	if f.state.synced() {
		p.table = f.state.table()
	}
	if e := f.snaps.current.Load(); e != nil && e.parts == p {
		return &e.snap
	}
	e := &snapshotEntry{parts: p, snap: routing.Snapshot{Self: p.self, Table: p.table, ViewStale: p.stale, Records: *p.records}}
	if p.local != nil {
		e.snap.Local = p.local
	}
	if p.deadline != nil {
		e.snap.SyncGraceUntil = *p.deadline
	}
	// Two requests may build it at once: both builds are equal.
	f.snaps.current.Store(e)
	return &e.snap
}
