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
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"sigs.k8s.io/peerdiscovery/test/poll"
)

func TestPeriodicBookmarks(t *testing.T) {
	s := newWidgetStore(t, func(c *Config) { c.BookmarkInterval = 5 * time.Millisecond })
	mustReplace(t, s, objs(wid("a", "red")))
	withBM := startWatch(t, s, &metainternalversion.ListOptions{AllowWatchBookmarks: true, SendInitialEvents: ptr(false)})
	without := startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)})

	mustReplace(t, s, objs(wid("a", "blue")))
	changeRV := s.ResourceVersion()
	var lastRV uint64
	sawEvent := false
	bookmarks := 0
	for bookmarks < 3 {
		e := next(t, withBM)
		switch e.Type {
		case watch.Modified:
			sawEvent = true
		case watch.Bookmark:
			if ok, _ := storage.HasInitialEventsEndBookmarkAnnotation(e.Object); ok {
				t.Fatal("periodic bookmark carries the initial-events-end annotation")
			}
			if e.Object.(*Widget).Name != "" {
				t.Fatal("bookmark object not empty")
			}
			rv := rvOf(t, e.Object)
			if rv < lastRV {
				t.Fatalf("bookmark RV went back %d → %d", lastRV, rv)
			}
			if sawEvent && rv < changeRV {
				t.Fatalf("bookmark RV %d after an event at %d", rv, changeRV)
			}
			lastRV = rv
			bookmarks++
		default:
			t.Fatalf("unexpected %v", e.Type)
		}
	}
	if !sawEvent {
		t.Fatal("change not delivered between bookmarks")
	}
	// The watcher that did not ask for bookmarks gets none.
	mustReplace(t, s, objs(wid("a", "blue"), sentinel("red")))
	for _, e := range []watch.Event{next(t, without), next(t, without)} {
		if e.Type == watch.Bookmark {
			t.Fatal("bookmark sent to a watcher that did not allow them")
		}
	}
}

func TestSlowWatcherIsEndedWithoutBlockingOthers(t *testing.T) {
	const buffer = 3
	s := newWidgetStore(t, func(c *Config) { c.WatcherBuffer = buffer })
	before := s.ResourceVersion()
	terminated := terminatedCount(t, s)
	slow := startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)})
	fast := startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)})

	// The writer changes one object 50 times; the fast watcher keeps up,
	// the slow one never reads. The writer must never wait for it.
	const changes = 50
	writer := make(chan error, 1)
	go func() {
		for i := 0; i < changes; i++ {
			mustReplace(t, s, objs(wid("a", strconv.Itoa(i))))
			want := ev{watch.Added, "a", "0"}
			if i > 0 {
				want = ev{watch.Modified, "a", strconv.Itoa(i)}
			}
			select {
			case e, ok := <-fast.ResultChan():
				e.Object = Unwrap(e.Object)
				if got := summarize(e); !ok || got != want {
					writer <- fmt.Errorf("fast watcher event %d: %+v (open %v), want %+v", i, got, ok, want)
					return
				}
			case <-time.After(eventually):
				writer <- fmt.Errorf("fast watcher got no event %d", i)
				return
			}
		}
		writer <- nil
	}()
	select {
	case err := <-writer:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * eventually):
		t.Fatal("writer blocked by a slow watcher")
	}
	// The slow one is ended at once, dropping what it queued (it never
	// read, so it never received anything), and counted.
	if got := expectClosed(t, slow); len(got) != 0 {
		t.Fatalf("a terminated watcher delivered %d queued events, want none", len(got))
	}
	poll.Eventually(t, "slow watcher to be forgotten", func() bool { return watcherCount(s) == 1 })
	if got := terminatedCount(t, s) - terminated; got != 1 {
		t.Fatalf("terminated watchers metric grew by %v, want 1", got)
	}
	// Its client resumes from the last RV it received and misses nothing.
	w := startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(before, 10)})
	want := []ev{{watch.Added, "a", "0"}}
	for i := 1; i < changes; i++ {
		want = append(want, ev{watch.Modified, "a", strconv.Itoa(i)})
	}
	expectEvents(t, w, want...)
}

func TestWatcherOverItsByteBudgetIsEnded(t *testing.T) {
	// Room for many entries but few bytes: one large change is always
	// accepted, the second queued one is not.
	s := newWidgetStore(t, func(c *Config) { c.WatcherBuffer = 100; c.WatcherBufferBytes = 64 << 10 })
	slow := startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)})
	live := startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)})
	big := func(color string) runtime.Object {
		w := wid("a", color)
		w.Spec.Tags = []string{strings.Repeat("x", 40<<10)}
		return w
	}
	for i := range 3 {
		mustReplace(t, s, []runtime.Object{big(strconv.Itoa(i))})
		nextNonBookmark(t, live)
	}
	if got := expectClosed(t, slow); len(got) != 0 {
		t.Fatalf("a terminated watcher delivered %d events, want none", len(got))
	}
	poll.Eventually(t, "slow watcher to be forgotten", func() bool { return watcherCount(s) == 1 })
	// The one that kept up is still served.
	mustReplace(t, s, []runtime.Object{big("3")})
	expectEvents(t, live, ev{watch.Modified, "a", "3"})
}

func TestWatchEnds(t *testing.T) {
	tests := []struct {
		name string
		opts metainternalversion.ListOptions
		end  func(s *Store, w watch.Interface, cancel context.CancelFunc)
	}{
		{"context cancelled", metainternalversion.ListOptions{}, func(_ *Store, _ watch.Interface, cancel context.CancelFunc) { cancel() }},
		{"watch stopped", metainternalversion.ListOptions{}, func(_ *Store, w watch.Interface, _ context.CancelFunc) { w.Stop(); w.Stop() }},
		{"store stopped", metainternalversion.ListOptions{}, func(s *Store, _ watch.Interface, _ context.CancelFunc) { s.Stop(); s.Stop() }},
		{"timeoutSeconds", metainternalversion.ListOptions{TimeoutSeconds: ptr(int64(1))}, func(*Store, watch.Interface, context.CancelFunc) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWidgetStore(t, nil)
			mustReplace(t, s, objs(wid("a", "red")))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := s.Watch(ctx, &tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			expectEvents(t, w, ev{watch.Added, "a", "red"})
			tt.end(s, w, cancel)
			got := expectClosed(t, w)
			if tt.name != "timeoutSeconds" && len(got) != 0 {
				t.Fatalf("events after the end: %v", got)
			}
			poll.Eventually(t, "watcher to be forgotten", func() bool { return watcherCount(s) == 0 })
			mustReplace(t, s, objs(wid("a", "blue"))) // the writer is unaffected
		})
	}
}

func TestStopEndsAllWatchersAndRefusesNew(t *testing.T) {
	s := newWidgetStore(t, nil)
	var ws []watch.Interface
	for i := 0; i < 10; i++ {
		ws = append(ws, startWatch(t, s, &metainternalversion.ListOptions{SendInitialEvents: ptr(false)}))
	}
	s.Stop()
	for _, w := range ws {
		expectClosed(t, w)
	}
	if _, err := s.Watch(context.Background(), nil); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("Watch after Stop: %v", err)
	}
	mustReplace(t, s, objs(wid("a", "red")))
	if n := len(listWidgets(t, s, nil).Items); n != 1 {
		t.Fatalf("List after Stop: %d items", n)
	}
}

// TestConcurrentWatchersStayConsistent runs writers, readers and many
// watchers at once (meaningful under -race) and checks every watcher's
// view: its initial state plus its events must equal a List with the same
// selector at the RV of its last event.
func TestConcurrentWatchersStayConsistent(t *testing.T) {
	s := newWidgetStore(t, func(c *Config) {
		c.BookmarkInterval = time.Millisecond
		c.WatcherBuffer = 1000
		c.HistorySize = 100000
	})
	colors := []string{"red", "blue", "green"}
	randomSet := func(r *rand.Rand) []*Widget {
		var set []*Widget
		for i := 0; i < 20; i++ {
			if r.Intn(3) > 0 {
				set = append(set, wid(fmt.Sprintf("w%02d", i), colors[r.Intn(len(colors))], "shard", strconv.Itoa(i%2)))
			}
		}
		return set
	}
	mustReplace(t, s, objs(randomSet(rand.New(rand.NewSource(1)))...))

	const watchers = 32
	const rounds = 80
	type result struct {
		opts  metainternalversion.ListOptions
		state map[string]string
		rv    uint64
		err   error
	}
	results := make([]result, watchers)
	var wg, ready sync.WaitGroup
	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	shard1 := mustLabels(t, "shard=1")
	for i := 0; i < 4; i++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				if _, err := s.List(context.Background(), &metainternalversion.ListOptions{LabelSelector: shard1}); err != nil {
					t.Error(err)
					return
				}
				_, _ = s.Get(context.Background(), "w03", nil)
			}
		}()
	}
	for i := 0; i < watchers; i++ {
		opts := metainternalversion.ListOptions{AllowWatchBookmarks: i%2 == 0}
		switch i % 4 {
		case 1:
			opts.FieldSelector = fields.OneTermEqualSelector("spec.color", "red")
		case 2:
			opts.LabelSelector = mustLabels(t, "shard=0")
		case 3:
			opts.SendInitialEvents = ptr(true)
			opts.AllowWatchBookmarks = true
			opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
		wg.Add(1)
		ready.Add(1)
		go func(i int, opts metainternalversion.ListOptions) {
			defer wg.Done()
			res := result{opts: opts, state: map[string]string{}}
			defer func() { results[i] = res }()
			// Half start from a list RV, half from the initial state, whose
			// synthetic ADDED events come in name order, not RV order.
			fromList := i%8 < 4
			if fromList {
				l, err := s.List(context.Background(), &opts)
				if err != nil {
					res.err = err
					ready.Done()
					return
				}
				res.state = state(l.(*WidgetList))
				res.rv, res.err = strconv.ParseUint(l.(*WidgetList).ResourceVersion, 10, 64)
				opts.ResourceVersion = l.(*WidgetList).ResourceVersion
				opts.SendInitialEvents = nil
				opts.ResourceVersionMatch = ""
			}
			w, err := s.Watch(context.Background(), &opts)
			ready.Done()
			if err != nil {
				res.err = err
				return
			}
			defer w.Stop()
			for e := range w.ResultChan() {
				wdg := Unwrap(e.Object).(*Widget)
				rv, err := strconv.ParseUint(wdg.ResourceVersion, 10, 64)
				if err != nil {
					res.err = err
					return
				}
				if (fromList || e.Type != watch.Added) && rv < res.rv {
					res.err = fmt.Errorf("RV went back %d → %d on %s", res.rv, rv, e.Type)
					return
				}
				res.rv = max(res.rv, rv)
				switch e.Type {
				case watch.Added, watch.Modified:
					res.state[wdg.Name] = wdg.Spec.Color
				case watch.Deleted:
					delete(res.state, wdg.Name)
				}
				if e.Type != watch.Bookmark && wdg.Name == "zz-done" {
					return
				}
			}
			res.err = fmt.Errorf("watch closed early")
		}(i, opts)
	}
	ready.Wait()
	var writers sync.WaitGroup
	for k := 0; k < 2; k++ {
		writers.Add(1)
		go func(seed int64) {
			defer writers.Done()
			r := rand.New(rand.NewSource(seed))
			for j := 0; j < rounds; j++ {
				if err := s.Replace(objs(randomSet(r)...)); err != nil {
					t.Error(err)
				}
			}
		}(int64(k + 2))
	}
	writers.Wait()
	// A final change every watcher sees: it matches every selector and
	// sorts last, so it is the final Replace's last event.
	final := append(randomSet(rand.New(rand.NewSource(99))), wid("zz-done", "red", "shard", "0"))
	mustReplace(t, s, objs(final...))
	finalRV := s.ResourceVersion()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(eventually):
		t.Fatal("watchers did not all see the final change")
	}
	close(stopReaders)
	readers.Wait()

	for i, res := range results {
		if res.err != nil {
			t.Fatalf("watcher %d: %v", i, res.err)
		}
		if res.rv != finalRV {
			t.Fatalf("watcher %d ended at RV %d, want %d", i, res.rv, finalRV)
		}
		opts := res.opts
		opts.ResourceVersion, opts.ResourceVersionMatch, opts.SendInitialEvents = "", "", nil
		want := state(listWidgets(t, s, &opts))
		if fmt.Sprint(res.state) != fmt.Sprint(want) {
			t.Fatalf("watcher %d (%+v) built\n%v\nList says\n%v", i, res.opts, res.state, want)
		}
	}
}
