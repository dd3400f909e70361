package memstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Replication: a leading clock's stores are copied to followers, which
// serve the same objects with the same resourceVersions. The leader hands
// out a Snapshot (a consistent cut of every store of the clock) and then
// every change in RV order (Subscribe); a follower installs the snapshot
// (Restore) and applies the changes (Apply). Encoding and transport are the
// caller's (pkg/replication).

// Snapshot is a consistent cut of every store of a clock.
type Snapshot struct {
	Timeline Timeline        `json:"timeline"`
	Stores   []StoreSnapshot `json:"stores"`
}

// StoreSnapshot is one store's content. Items are the stored objects
// themselves: read-only, shared with the store.
type StoreSnapshot struct {
	Resource string           `json:"resource"`
	LastRV   uint64           `json:"lastRV"`
	Items    []runtime.Object `json:"-"`
}

// Change is one replicated change. Object is the stored object for ADDED
// and MODIFIED (read-only, shared with the store) and nil for DELETED.
type Change struct {
	Type   watch.EventType `json:"type"`
	RV     uint64          `json:"rv,string"`
	Name   string          `json:"name"`
	Object runtime.Object  `json:"-"`
}

// Batch is the changes of one Replace of one store, in RV order.
type Batch struct {
	Resource string   `json:"resource"`
	Changes  []Change `json:"changes"`
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

	for _, s := range stores {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leading {
		// Only Demote ends leadership: a late snapshot from a former
		// leader must not silently demote the new one.
		return ErrLeading
	}
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

	s.mu.Lock()
	defer s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leading {
		return ErrLeading
	}
	byName := make(map[string]*entry, len(s.items))
	for _, e := range s.items {
		byName[e.name] = e
	}
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
	items := make([]*entry, 0, len(byName))
	for _, e := range byName {
		items = append(items, e)
	}
	slices.SortFunc(items, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	s.items, s.lastRV = items, last
	s.appendHistoryLocked(events)
	c.advanceLocked(last)
	s.dispatchLocked(events)
	return nil
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
