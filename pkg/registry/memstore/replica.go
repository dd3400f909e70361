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
	"cmp"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Replication: a leading clock's stores are copied to followers, which
// serve the same objects with the same resourceVersions. The leader hands
// out a Snapshot (a consistent cut of every store of the clock) and then
// every change in RV order (Subscribe); a follower installs the snapshot
// (Restore) and applies the changes (Apply). Encoding and transport are the
// caller's (pkg/replication, which has its own wire types): these types
// are in-process only.

// Snapshot is a consistent cut of every store of a clock.
type Snapshot struct {
	Timeline Timeline
	Stores   []StoreSnapshot
}

// StoreSnapshot is one store's content. Items are the stored objects
// themselves: read-only, shared with the store.
type StoreSnapshot struct {
	Resource string
	LastRV   uint64
	Items    []runtime.Object
}

// Change is one replicated change. Object is the stored object for ADDED
// and MODIFIED (read-only, shared with the store) and nil for DELETED.
type Change struct {
	Type   watch.EventType
	RV     uint64
	Name   string
	Object runtime.Object
}

// Batch is the changes of one Replace of one store, in RV order.
type Batch struct {
	Resource string
	Changes  []Change
}

// Resource is the key of a store in snapshots and batches.
func (s *Store) Resource() string { return s.resource.String() }

// NewObject returns an empty object of the type of the clock's store for
// resource: what a follower decodes replicated objects into.
func (c *Clock) NewObject(resource string) (runtime.Object, error) {
	s, err := c.storeFor(resource)
	if err != nil {
		return nil, err
	}
	return s.newFunc(), nil
}

// Subscription delivers a leader's changes after its snapshot.
type Subscription struct {
	c  *Clock
	ch chan Batch
}

// Batches delivers the changes in RV order. It is closed when the
// subscriber fell more than its buffer behind, on Close, or when the clock
// stops leading: the subscriber then starts again from a snapshot.
func (s *Subscription) Batches() <-chan Batch { return s.ch }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if _, ok := s.c.subs[s]; ok {
		delete(s.c.subs, s)
		close(s.ch)
	}
}

// ErrNotLeading is returned by Subscribe on a following clock.
var ErrNotLeading = errors.New("memstore: this replica does not lead")

// Start is how a subscription begins: either the changes after the
// subscriber's resourceVersion (Replay, oldest first), or, when those are
// not all kept or that resourceVersion is not on this timeline, a Snapshot.
// Timeline is the leader's at the subscription.
type Start struct {
	Timeline Timeline
	Snapshot *Snapshot
	Replay   []Batch
}

// Subscribe starts a subscription for a follower whose state is at from
// (0: none) and returns the changes after it (or a snapshot) and a
// subscription to the live ones. buffer bounds the batches queued for a
// slow subscriber.
func (c *Clock) Subscribe(from uint64, buffer int) (Start, *Subscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leading {
		return Start{}, nil, ErrNotLeading
	}
	start := Start{Timeline: c.timelineLocked()}
	if replay, ok := c.replayLocked(from); ok {
		start.Replay = replay
	} else {
		snap := Snapshot{Timeline: start.Timeline}
		for _, s := range c.stores {
			ss := StoreSnapshot{Resource: s.Resource(), LastRV: s.lastRV, Items: make([]runtime.Object, len(s.items))}
			for i, e := range s.items {
				ss.Items[i] = e.obj
			}
			snap.Stores = append(snap.Stores, ss)
		}
		start.Snapshot = &snap
	}
	sub := &Subscription{c: c, ch: make(chan Batch, max(buffer, 1))}
	if c.subs == nil {
		c.subs = map[*Subscription]struct{}{}
	}
	c.subs[sub] = struct{}{}
	return start, sub, nil
}

// replayLocked returns every change after from, in RV order, one batch per
// run of changes of one store, when this clock's timeline has from and no
// store has dropped a change after it.
func (c *Clock) replayLocked(from uint64) ([]Batch, bool) {
	if from == 0 || from > c.cur.Load() || !c.ownsLocked(from) {
		return nil, false
	}
	type item struct {
		s  *Store
		ev *event
	}
	var all []item
	for _, s := range c.stores {
		if from < s.compactedRV {
			return nil, false
		}
		for _, ev := range s.history {
			if ev.rv > from {
				all = append(all, item{s, ev})
			}
		}
	}
	slices.SortFunc(all, func(a, b item) int { return cmp.Compare(a.ev.rv, b.ev.rv) })
	var out []Batch
	for _, it := range all {
		if len(out) == 0 || out[len(out)-1].Resource != it.s.Resource() {
			out = append(out, Batch{Resource: it.s.Resource()})
		}
		b := &out[len(out)-1]
		b.Changes = append(b.Changes, changeOf(it.ev))
	}
	return out, true
}

func changeOf(ev *event) Change {
	ch := Change{Type: ev.typ, RV: ev.rv}
	if ev.cur != nil {
		ch.Name, ch.Object = ev.cur.name, ev.cur.obj
	} else {
		ch.Name = ev.prev.name
	}
	return ch
}

// feedLocked hands one Replace's changes to the subscribers without
// blocking; one that is full is ended (it resubscribes from a snapshot).
func (c *Clock) feedLocked(s *Store, events []*event) {
	if len(c.subs) == 0 {
		return
	}
	b := Batch{Resource: s.Resource(), Changes: make([]Change, len(events))}
	for i, ev := range events {
		b.Changes[i] = changeOf(ev)
	}
	for sub := range c.subs {
		select {
		case sub.ch <- b:
		default:
			delete(c.subs, sub)
			close(sub.ch)
		}
	}
}

func (c *Clock) closeSubsLocked() {
	for sub := range c.subs {
		delete(c.subs, sub)
		close(sub.ch)
	}
}

func (c *Clock) storeFor(resource string) (*Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.stores {
		if s.Resource() == resource {
			return s, nil
		}
	}
	return nil, fmt.Errorf("memstore: no store for %q", resource)
}
