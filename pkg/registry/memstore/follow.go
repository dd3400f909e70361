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

package memstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// replicaEntry makes a stored entry of a decoded replicated object, which
// the store then owns (no copy).
func (s *Store) replicaEntry(obj runtime.Object) (*entry, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("memstore %s: replicated object: %w", s.resource, err)
	}
	if m.GetName() == "" {
		return nil, fmt.Errorf("memstore %s: replicated object without a name", s.resource)
	}
	if _, err := versioner.ObjectResourceVersion(obj); err != nil {
		return nil, fmt.Errorf("memstore %s: replicated object %q: %w", s.resource, m.GetName(), err)
	}
	l, f, err := s.attrFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("memstore %s: attributes of %q: %w", s.resource, m.GetName(), err)
	}
	return newStoredEntry(m.GetName(), obj, l, f), nil
}

// Restore makes the clock follow a leader from snap: every store of the
// clock takes the snapshot's content, with the leader's resourceVersions.
// A store whose content is already the snapshot's (same last change, same
// objects at the same RVs: a follower reconnecting in step) is left alone
// with its watchers and history. Any other store is reset: its watchers are
// ended after what they have queued (they resume from their last RV, which
// is valid from the snapshot on, 410 before it) and its history starts at
// the snapshot. A leading clock refuses (Demote it first).
func (c *Clock) Restore(snap Snapshot) error {
	c.mu.Lock()
	stores, leading := slices.Clone(c.stores), c.leading
	c.mu.Unlock()
	if leading {
		return ErrLeading
	}
	if epochOf(snap.Timeline.Current) == 0 {
		return fmt.Errorf("memstore: snapshot without a current resourceVersion")
	}
	next := make([][]*entry, len(stores))
	lastRVs := make([]uint64, len(stores))
	seen := make([]bool, len(stores))
	for _, ss := range snap.Stores {
		i := slices.IndexFunc(stores, func(s *Store) bool { return s.Resource() == ss.Resource })
		if i < 0 {
			return fmt.Errorf("memstore: snapshot names an unknown store %q", ss.Resource)
		}
		if seen[i] {
			return fmt.Errorf("memstore: snapshot names store %q twice", ss.Resource)
		}
		if ss.LastRV > snap.Timeline.Current {
			return fmt.Errorf("memstore: snapshot of %q is ahead of its timeline (%d > %d)", ss.Resource, ss.LastRV, snap.Timeline.Current)
		}
		seen[i] = true
		entries := make([]*entry, 0, len(ss.Items))
		for _, o := range ss.Items {
			e, err := stores[i].replicaEntry(o)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
		slices.SortFunc(entries, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
		for k := 1; k < len(entries); k++ {
			if entries[k].name == entries[k-1].name {
				return fmt.Errorf("memstore: snapshot of %q has %q twice", ss.Resource, entries[k].name)
			}
		}
		next[i], lastRVs[i] = entries, ss.LastRV
	}
	for i, s := range stores {
		if !seen[i] {
			return fmt.Errorf("memstore: snapshot lacks store %q", s.Resource())
		}
	}

	unlock, err := c.lockFollowing(stores...)
	if err != nil {
		return err
	}
	defer unlock()
	for i, s := range stores {
		if s.lastRV == lastRVs[i] && sameVersions(s.items, next[i]) {
			continue
		}
		clear(s.history)
		s.history, s.historyUsed, s.compactedRV = nil, 0, lastRVs[i]
		s.items, s.lastRV = next[i], lastRVs[i]
		for id, w := range s.watchers {
			w.endAfterQueue()
			delete(s.watchers, id)
		}
	}
	c.past = slices.Clone(snap.Timeline.Past)
	c.advanceLocked(snap.Timeline.Current)
	return nil
}

// Resume continues a following clock from its own state with the changes a
// leader replayed after it (Start.Replay): the follower's watchers and
// history stay, and it ends at the leader's position.
func (c *Clock) Resume(tl Timeline, replay []Batch) error {
	c.mu.Lock()
	if c.leading {
		c.mu.Unlock()
		return ErrLeading
	}
	if cur := c.cur.Load(); cur > tl.Current {
		c.mu.Unlock()
		return fmt.Errorf("memstore: this replica (at %d) is ahead of its leader (at %d)", cur, tl.Current)
	}
	// The leader's timeline from now on: its past epochs (which include
	// this replica's current one, or it would have sent a snapshot).
	c.past = slices.Clone(tl.Past)
	c.mu.Unlock()
	for _, b := range replay {
		if err := c.apply(b, tl); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tl.Current > c.cur.Load() {
		c.advanceLocked(tl.Current)
	}
	return nil
}

// sameVersions reports whether two sorted entry lists hold the same names
// at the same resourceVersions (an RV names one content on a timeline).
func sameVersions(a, b []*entry) bool {
	return slices.EqualFunc(a, b, func(x, y *entry) bool {
		if x.name != y.name {
			return false
		}
		rx, _ := versioner.ObjectResourceVersion(x.obj)
		ry, _ := versioner.ObjectResourceVersion(y.obj)
		return rx == ry
	})
}

// Apply applies one batch of a leader's changes to a following clock's
// store, as the leader made them: same objects, same resourceVersions, one
// watch event each. A batch that does not continue this replica's state
// (an RV not after the current one or of another epoch, an ADDED object
// that exists, a MODIFIED or DELETED one that does not) is refused whole:
// the follower has lost step and must Restore from a new snapshot.
func (c *Clock) Apply(b Batch) error {
	return c.apply(b, Timeline{})
}

// apply is Apply; a replay may also carry changes of the leader's earlier
// epochs (tl.Past), a live batch only the current one.
func (c *Clock) apply(b Batch, tl Timeline) error {
	s, err := c.storeFor(b.Resource)
	if err != nil {
		return err
	}
	if len(b.Changes) == 0 {
		return nil
	}
	prepared := make([]*entry, len(b.Changes))
	for i, ch := range b.Changes {
		switch ch.Type {
		case watch.Added, watch.Modified:
			if ch.Object == nil {
				return fmt.Errorf("memstore %s: %s %q without an object", s.resource, ch.Type, ch.Name)
			}
			e, err := s.replicaEntry(ch.Object)
			if err != nil {
				return err
			}
			if e.name != ch.Name {
				return fmt.Errorf("memstore %s: change names %q, its object %q", s.resource, ch.Name, e.name)
			}
			if rv, _ := versioner.ObjectResourceVersion(ch.Object); rv != ch.RV {
				return fmt.Errorf("memstore %s: change of %q at %d carries an object at %d", s.resource, ch.Name, ch.RV, rv)
			}
			prepared[i] = e
		case watch.Deleted:
		default:
			return fmt.Errorf("memstore %s: unexpected change type %q", s.resource, ch.Type)
		}
	}

	unlock, err := c.lockFollowing(s)
	if err != nil {
		return err
	}
	defer unlock()
	byName := entriesByName(s.items)
	events := make([]*event, len(b.Changes))
	last := c.cur.Load()
	now := time.Now()
	for i, ch := range b.Changes {
		if ch.RV <= last || epochOf(ch.RV) != epochOf(last) && !onTimeline(tl, ch.RV) {
			return fmt.Errorf("memstore %s: change at %d does not follow %d", s.resource, ch.RV, last)
		}
		last = ch.RV
		prev := byName[ch.Name]
		ev := &event{typ: ch.Type, rv: ch.RV, prev: prev, cur: prepared[i], at: now}
		switch {
		case ch.Type == watch.Added && prev != nil, ch.Type != watch.Added && prev == nil:
			return fmt.Errorf("memstore %s: %s of %q does not match this replica's state", s.resource, ch.Type, ch.Name)
		case ch.Type == watch.Deleted:
			delete(byName, ch.Name)
		default:
			byName[ch.Name] = prepared[i]
		}
		events[i] = ev
	}
	s.items, s.lastRV = sortedEntries(byName), last
	s.appendHistoryLocked(events)
	c.advanceLocked(last)
	s.dispatchLocked(events)
	return nil
}

// lockFollowing takes the locks a change made on a leader's behalf needs:
// the stores' and then the clock's, the order Replace takes them in. On a
// leading clock it takes none and refuses: only Demote ends leadership, so
// a late snapshot or change from a former leader must not silently demote
// the new one.
func (c *Clock) lockFollowing(stores ...*Store) (unlock func(), err error) {
	for _, s := range stores {
		s.mu.Lock()
	}
	c.mu.Lock()
	unlock = func() {
		c.mu.Unlock()
		for _, s := range slices.Backward(stores) {
			s.mu.Unlock()
		}
	}
	if c.leading {
		unlock()
		return nil, ErrLeading
	}
	return unlock, nil
}

// ErrLeading is returned by Apply on a leading clock.
var ErrLeading = errors.New("memstore: this replica leads; it does not apply another's changes")

// onTimeline reports whether rv belongs to tl: its current epoch up to its
// current RV, or an earlier epoch up to the last counter seen in it.
func onTimeline(tl Timeline, rv uint64) bool {
	if e := epochOf(rv); e == 0 || rv > tl.Current {
		return false
	} else if e == epochOf(tl.Current) {
		return true
	}
	for _, p := range tl.Past {
		if p.Epoch == epochOf(rv) {
			return counterOf(rv) <= p.Last
		}
	}
	return false
}
