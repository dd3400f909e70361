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
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

var gadgetResource = schema.GroupResource{Group: widgetResource.Group, Resource: "gadgets"}

// replica is one process: a clock and two stores on it.
type replica struct {
	clock            *Clock
	widgets, gadgets *Store
}

func newReplica(t *testing.T, clock *Clock) *replica {
	r := &replica{clock: clock}
	r.widgets = newWidgetStore(t, func(c *Config) { c.Clock = clock })
	r.gadgets = newWidgetStore(t, func(c *Config) { c.Clock = clock; c.Resource = gadgetResource })
	return r
}

// decoded copies what a snapshot or batch shares with the leader, as the
// wire does.
func decodedSnapshot(s Snapshot) Snapshot {
	out := s
	out.Stores = nil
	for _, ss := range s.Stores {
		c := ss
		c.Items = nil
		for _, o := range ss.Items {
			c.Items = append(c.Items, o.DeepCopyObject())
		}
		out.Stores = append(out.Stores, c)
	}
	return out
}

func decodedBatch(b Batch) Batch {
	out := Batch{Resource: b.Resource}
	for _, ch := range b.Changes {
		if ch.Object != nil {
			ch.Object = ch.Object.DeepCopyObject()
		}
		out.Changes = append(out.Changes, ch)
	}
	return out
}

// follow restores f from l and applies l's batches until stop is closed.
func follow(t *testing.T, l, f *Clock) (stop func()) {
	t.Helper()
	start, sub, err := l.Subscribe(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(decodedSnapshot(*start.Snapshot)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range sub.Batches() {
			if err := f.Apply(decodedBatch(b)); err != nil {
				t.Errorf("Apply: %v", err)
				return
			}
		}
	}()
	return func() { sub.Close(); <-done }
}

func sameList(t *testing.T, a, b *Store) {
	t.Helper()
	la, lb := listWidgets(t, a, nil), listWidgets(t, b, nil)
	if !reflect.DeepEqual(la, lb) {
		t.Fatalf("replicas differ:\n%+v\n%+v", la, lb)
	}
}

func TestReplicaServesTheLeadersObjectsAndResourceVersions(t *testing.T) {
	leader := newReplica(t, newClockWithEpoch(testEpoch))
	leader.widgets.Replace(objs(wid("a", "red"), wid("b", "red")))
	leader.gadgets.Replace(objs(wid("g", "red")))

	follower := newReplica(t, NewStandbyClock())
	stop := follow(t, leader.clock, follower.clock)
	defer stop()
	if follower.clock.Leading() {
		t.Fatal("a restored clock must follow")
	}
	sameList(t, leader.widgets, follower.widgets)
	sameList(t, leader.gadgets, follower.gadgets)

	// A watch started on the leader resumes on the follower from the
	// leader's RV, and the other way round: no 410, same events.
	from := listWidgets(t, leader.widgets, nil).ResourceVersion
	wl := startWatch(t, leader.widgets, &metainternalversion.ListOptions{ResourceVersion: from})
	wf := startWatch(t, follower.widgets, &metainternalversion.ListOptions{ResourceVersion: from})
	leader.widgets.Replace(objs(wid("a", "blue"), wid("c", "red")))
	leader.gadgets.Replace(nil)
	want := []ev{{watch.Modified, "a", "blue"}, {watch.Deleted, "b", "red"}, {watch.Added, "c", "red"}}
	gotL := expectEvents(t, wl, want...)
	gotF := expectEvents(t, wf, want...)
	for i := range gotL {
		if rvOf(t, gotL[i].Object) != rvOf(t, gotF[i].Object) {
			t.Fatalf("event %d: RV %d on the leader, %d on the follower", i, rvOf(t, gotL[i].Object), rvOf(t, gotF[i].Object))
		}
	}
	waitFor(t, "the follower to catch up", func() bool { return follower.clock.Current() == leader.clock.Current() })
	sameList(t, leader.widgets, follower.widgets)
	sameList(t, leader.gadgets, follower.gadgets)

	// Resumed alternately with the last RV seen.
	last := strconv.FormatUint(rvOf(t, gotF[len(gotF)-1].Object), 10)
	for i, s := range []*Store{follower.widgets, leader.widgets, follower.widgets} {
		w, err := s.Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: last})
		if err != nil {
			t.Fatalf("resume %d from %s: %v", i, last, err)
		}
		w.Stop()
	}
	if _, err := follower.widgets.Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(uint64(otherEpoch)<<32|1, 10)}); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("an RV of another timeline: %v, want 410", err)
	}
	if err := leader.clock.Restore(Snapshot{Timeline: Timeline{Current: 1 << 32}}); err != ErrLeading {
		t.Fatalf("a late snapshot must not demote a leader: %v", err)
	}
}

func TestFollowerWaitsForAResourceVersionItHasNotReached(t *testing.T) {
	leader := newReplica(t, newClockWithEpoch(testEpoch))
	leader.widgets.Replace(objs(wid("a", "red")))
	follower := newReplica(t, NewStandbyClock())
	start, sub, err := leader.clock.Subscribe(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := follower.clock.Restore(decodedSnapshot(*start.Snapshot)); err != nil {
		t.Fatal(err)
	}
	leader.widgets.Replace(objs(wid("a", "blue")))
	ahead := strconv.FormatUint(leader.clock.Current(), 10)
	go func() {
		time.Sleep(200 * time.Millisecond)
		if err := follower.clock.Apply(decodedBatch(<-sub.Batches())); err != nil {
			t.Errorf("Apply: %v", err)
		}
	}()
	// The follower is one change behind: the watch waits for it instead of
	// answering "too large resource version".
	w := startWatch(t, follower.widgets, &metainternalversion.ListOptions{ResourceVersion: ahead})
	leader.widgets.Replace(objs(wid("a", "green")))
	if err := follower.clock.Apply(decodedBatch(<-sub.Batches())); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, ev{watch.Modified, "a", "green"})
}

func TestPromotedFollowerContinuesTheTimeline(t *testing.T) {
	leader := newReplica(t, newClockWithEpoch(testEpoch))
	leader.widgets.Replace(objs(wid("a", "red")))
	follower := newReplica(t, NewStandbyClock())
	stop := follow(t, leader.clock, follower.clock)
	leader.widgets.Replace(objs(wid("a", "blue")))
	waitFor(t, "the follower to catch up", func() bool { return follower.clock.Current() == leader.clock.Current() })
	stop()
	seen := leader.clock.Current()
	// The leader makes a change the follower never receives, then dies.
	leader.widgets.Replace(objs(wid("a", "lost")))
	unseen := leader.clock.Current()

	follower.clock.Promote()
	if !follower.clock.Leading() || follower.clock.Epoch() <= testEpoch {
		t.Fatalf("promoted clock: leading %v epoch %d, want a new epoch above %d", follower.clock.Leading(), follower.clock.Epoch(), testEpoch)
	}
	w := startWatch(t, follower.widgets, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(seen, 10)})
	follower.widgets.Replace(objs(wid("a", "green")))
	got := expectEvents(t, w, ev{watch.Modified, "a", "green"})
	if rv := rvOf(t, got[0].Object); rv <= unseen {
		t.Fatalf("new leader's RV %d is not after every RV of the old epoch (%d)", rv, unseen)
	}
	// An RV the new leader never saw is 410: the client relists rather
	// than keep the lost change.
	if _, err := follower.widgets.Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(unseen, 10)}); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from an RV the new leader never saw: %v, want 410", err)
	}
	if _, _, err := follower.clock.Subscribe(0, 1); err != nil {
		t.Fatalf("a leader serves subscriptions: %v", err)
	}
}

func TestRestoreKeepsWatchersOnlyWhenInStep(t *testing.T) {
	leader := newReplica(t, newClockWithEpoch(testEpoch))
	leader.widgets.Replace(objs(wid("a", "red")))
	leader.gadgets.Replace(objs(wid("g", "red")))
	follower := newReplica(t, NewStandbyClock())
	start, sub, _ := leader.clock.Subscribe(0, 10)
	sub.Close()
	if err := follower.clock.Restore(decodedSnapshot(*start.Snapshot)); err != nil {
		t.Fatal(err)
	}
	ww := startWatch(t, follower.widgets, &metainternalversion.ListOptions{ResourceVersion: "0", SendInitialEvents: ptr(false)})
	wg := startWatch(t, follower.gadgets, &metainternalversion.ListOptions{ResourceVersion: "0", SendInitialEvents: ptr(false)})

	// Reconnect after a change of gadgets only: widgets are in step and
	// keep their watcher; gadgets are reset and theirs ends.
	leader.gadgets.Replace(objs(wid("g", "blue")))
	start, sub, _ = leader.clock.Subscribe(0, 10)
	sub.Close()
	if err := follower.clock.Restore(decodedSnapshot(*start.Snapshot)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, wg)
	if watcherCount(follower.widgets) != 1 {
		t.Fatal("an in-step store must keep its watchers across a reconnect")
	}
	sameList(t, leader.gadgets, follower.gadgets)
	ww.Stop()
}

func TestApplyRefusesABatchOutOfStep(t *testing.T) {
	leader := newReplica(t, newClockWithEpoch(testEpoch))
	leader.widgets.Replace(objs(wid("a", "red")))
	follower := newReplica(t, NewStandbyClock())
	start, sub, _ := leader.clock.Subscribe(0, 10)
	defer sub.Close()
	if err := follower.clock.Restore(decodedSnapshot(*start.Snapshot)); err != nil {
		t.Fatal(err)
	}
	leader.widgets.Replace(objs(wid("a", "blue")))
	b1 := decodedBatch(<-sub.Batches())
	if err := follower.clock.Apply(b1); err != nil {
		t.Fatal(err)
	}
	cases := map[string]Batch{
		"replayed":           b1,
		"unknown store":      {Resource: "nope.example.com", Changes: b1.Changes},
		"deleted unknown":    {Resource: b1.Resource, Changes: []Change{{Type: watch.Deleted, RV: leader.clock.Current() + 10, Name: "zz"}}},
		"object RV mismatch": {Resource: b1.Resource, Changes: []Change{{Type: watch.Added, RV: leader.clock.Current() + 20, Name: "c", Object: wid("c", "red")}}},
	}
	for name, b := range cases {
		if err := follower.clock.Apply(b); err == nil {
			t.Errorf("%s: applied, want refused", name)
		}
	}
	if err := leader.clock.Apply(b1); err != ErrLeading {
		t.Fatalf("a leader applied a replicated batch: %v", err)
	}
	if _, _, err := follower.clock.Subscribe(0, 1); err != ErrNotLeading {
		t.Fatalf("a follower served a subscription: %v", err)
	}
}

func TestSlowSubscriberIsEnded(t *testing.T) {
	leader := newReplica(t, newClockWithEpoch(testEpoch))
	_, sub, _ := leader.clock.Subscribe(0, 2)
	for i := 0; i < 5; i++ {
		leader.widgets.Replace(objs(wid("a", strconv.Itoa(i))))
	}
	n := 0
	for range sub.Batches() {
		n++
	}
	if n != 2 {
		t.Fatalf("got %d batches before the end, want the 2 buffered", n)
	}
	sub.Close() // idempotent after the feed ended it
}

func decodedReplay(bs []Batch) []Batch {
	out := make([]Batch, len(bs))
	for i, b := range bs {
		out[i] = decodedBatch(b)
	}
	return out
}

func TestHandOverReplaysInsteadOfResetting(t *testing.T) {
	a := newReplica(t, newClockWithEpoch(testEpoch))
	a.widgets.Replace(objs(wid("a", "red")))
	b := newReplica(t, NewStandbyClock())
	stop := follow(t, a.clock, b.clock)
	a.widgets.Replace(objs(wid("a", "blue")))
	waitFor(t, "b in step", func() bool { return b.clock.Current() == a.clock.Current() })
	stop()

	// a hands over to b; b changes things; a resumes from where it was.
	w := startWatch(t, a.widgets, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(a.clock.Current(), 10)})
	a.clock.Demote()
	b.clock.Promote()
	b.widgets.Replace(objs(wid("a", "green")))
	b.gadgets.Replace(objs(wid("g", "red")))
	start, sub, err := b.clock.Subscribe(a.clock.Current(), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if start.Snapshot != nil || len(start.Replay) != 2 {
		t.Fatalf("an in-step follower must get a replay, got snapshot %v, %d batches", start.Snapshot != nil, len(start.Replay))
	}
	if err := a.clock.Resume(start.Timeline, decodedReplay(start.Replay)); err != nil {
		t.Fatal(err)
	}
	got := expectEvents(t, w, ev{watch.Modified, "a", "green"})
	if rvOf(t, got[0].Object) != b.widgets.ResourceVersion() {
		t.Fatal("the replayed event must carry the new leader's RV")
	}
	sameList(t, a.widgets, b.widgets)
	sameList(t, a.gadgets, b.gadgets)
	b.widgets.Replace(objs(wid("a", "pink")))
	if err := a.clock.Apply(decodedBatch(<-sub.Batches())); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, w, ev{watch.Modified, "a", "pink"})

	// A replica with a change its new leader never saw gets a snapshot.
	c := newReplica(t, NewStandbyClock())
	stop = follow(t, b.clock, c.clock)
	waitFor(t, "c in step", func() bool { return c.clock.Current() == b.clock.Current() })
	stop()
	b.widgets.Replace(objs(wid("a", "lost")))
	b.clock.Demote()
	c.clock.Promote()
	if start, sub, _ = c.clock.Subscribe(b.clock.Current(), 10); start.Snapshot == nil {
		t.Fatal("a follower ahead of its new leader's timeline must get a snapshot")
	}
	sub.Close()
	if err := b.clock.Restore(decodedSnapshot(*start.Snapshot)); err != nil {
		t.Fatal(err)
	}
	sameList(t, b.widgets, c.widgets)
}
