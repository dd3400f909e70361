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
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// sentinel is added to a set to prove, by arriving next, that nothing else
// was emitted before it. Its label matches the selectors used here.
func sentinel(color string) *Widget { return wid("zz-sentinel", color, "team", "x") }

func TestWatchStartingPoints(t *testing.T) {
	initial := []*Widget{wid("a", "red"), wid("b", "blue")}
	live := []*Widget{wid("a", "red"), wid("b", "blue"), wid("c", "red")}
	addedInitial := []ev{{watch.Added, "a", "red"}, {watch.Added, "b", "blue"}}
	addedLive := ev{watch.Added, "c", "red"}

	tests := []struct {
		name         string
		opts         metainternalversion.ListOptions
		wantInitial  []ev
		wantEndMark  bool
		wantLiveOnly bool
	}{
		{name: "rv unset: initial state then live", opts: metainternalversion.ListOptions{}, wantInitial: addedInitial},
		{name: "rv 0: initial state then live", opts: metainternalversion.ListOptions{ResourceVersion: "0"}, wantInitial: addedInitial},
		{name: "rv unset with bookmarks: no end bookmark without sendInitialEvents", opts: metainternalversion.ListOptions{AllowWatchBookmarks: true}, wantInitial: addedInitial},
		{name: "sendInitialEvents=false: live only", opts: metainternalversion.ListOptions{SendInitialEvents: ptr(false)}, wantLiveOnly: true},
		{name: "sendInitialEvents=false rv 0: live only", opts: metainternalversion.ListOptions{ResourceVersion: "0", SendInitialEvents: ptr(false)}, wantLiveOnly: true},
		{name: "watch-list: initial state, end bookmark, live", opts: metainternalversion.ListOptions{
			SendInitialEvents: ptr(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		}, wantInitial: addedInitial, wantEndMark: true},
		{name: "watch-list rv 0", opts: metainternalversion.ListOptions{
			ResourceVersion: "0", SendInitialEvents: ptr(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		}, wantInitial: addedInitial, wantEndMark: true},
		{name: "sendInitialEvents without bookmarks: no end bookmark", opts: metainternalversion.ListOptions{
			SendInitialEvents: ptr(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		}, wantInitial: addedInitial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newWidgetStore(t, nil)
			mustReplace(t, s, objs(initial...))
			snapshotRV := s.ResourceVersion()
			w := startWatch(t, s, &tt.opts)
			mustReplace(t, s, objs(live...))

			expectEvents(t, w, tt.wantInitial...)
			if tt.wantEndMark {
				e := next(t, w)
				if e.Type != watch.Bookmark {
					t.Fatalf("got %v, want the initial-events-end BOOKMARK", e.Type)
				}
				if _, ok := e.Object.(*Widget); !ok {
					t.Fatalf("bookmark object %T, want an empty NewFunc object", e.Object)
				}
				if ok, err := storage.HasInitialEventsEndBookmarkAnnotation(e.Object); !ok || err != nil {
					t.Fatalf("bookmark lacks %s: %v", metav1.InitialEventsAnnotationKey, e.Object.(*Widget).Annotations)
				}
				if got := rvOf(t, e.Object); got != snapshotRV {
					t.Fatalf("bookmark RV %d, want snapshot RV %d", got, snapshotRV)
				}
				if e.Object.(*Widget).Name != "" {
					t.Fatal("bookmark object is not empty")
				}
			}
			expectEvents(t, w, addedLive)
		})
	}
}

func TestWatchFromResourceVersionReplaysExactly(t *testing.T) {
	s := newWidgetStore(t, nil)
	start := listWidgets(t, s, nil)
	all := startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: start.ResourceVersion})
	sets := [][]*Widget{
		{wid("a", "red")},
		{wid("a", "red"), wid("b", "blue"), wid("c", "red")},
		{wid("a", "blue"), wid("b", "blue"), wid("c", "red")},
		{wid("a", "blue"), wid("b", "blue"), wid("c", "red")}, // no-op
		{wid("c", "green")},
		{wid("c", "green"), wid("d", "red")},
	}
	var listRVs []string
	for _, set := range sets {
		mustReplace(t, s, objs(set...))
		listRVs = append(listRVs, listWidgets(t, s, nil).ResourceVersion)
	}
	var history []ev
	var rvs []uint64
	for len(history) < 8 { // events of the sets above
		e := next(t, all)
		history = append(history, summarize(e))
		rvs = append(rvs, rvOf(t, e.Object))
	}
	// From every event RV and every list RV, exactly the later events.
	froms := append([]string{start.ResourceVersion}, listRVs...)
	for _, rv := range rvs {
		froms = append(froms, strconv.FormatUint(rv, 10))
	}
	for _, from := range froms {
		t.Run("from "+from, func(t *testing.T) {
			fromRV, _ := strconv.ParseUint(from, 10, 64)
			var want []ev
			for i, rv := range rvs {
				if rv > fromRV {
					want = append(want, history[i])
				}
			}
			w := startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: from})
			expectEvents(t, w, want...)
			// Nothing else before a fresh change.
			mustReplace(t, s, objs(wid("c", "green"), wid("d", "red"), sentinel(from)))
			expectEvents(t, w, ev{watch.Added, "zz-sentinel", from})
			mustReplace(t, s, objs(wid("c", "green"), wid("d", "red")))
			expectEvents(t, w, ev{watch.Deleted, "zz-sentinel", from})
			// Keep later subtests' expectations: drop the sentinel events
			// from the picture by remembering them as history too.
			history = append(history, ev{watch.Added, "zz-sentinel", from}, ev{watch.Deleted, "zz-sentinel", from})
			rvs = append(rvs, s.ResourceVersion()-1, s.ResourceVersion())
		})
	}
}

func TestWatchResourceVersionErrors(t *testing.T) {
	s := newWidgetStore(t, func(c *Config) { c.HistorySize = 3 })
	mustReplace(t, s, objs(wid("a", "red")))
	early := s.ResourceVersion()
	for i := 0; i < 5; i++ {
		mustReplace(t, s, objs(wid("a", fmt.Sprint(i))))
	}
	f := func(v uint64) string { return strconv.FormatUint(v, 10) }
	cur := s.ResourceVersion()
	tests := []struct {
		name  string
		opts  metainternalversion.ListOptions
		check func(error) bool
	}{
		{"older than history", metainternalversion.ListOptions{ResourceVersion: f(early)}, apierrors.IsResourceExpired},
		{"other epoch", metainternalversion.ListOptions{ResourceVersion: f(uint64(otherEpoch)<<32 | 2)}, apierrors.IsResourceExpired},
		{"epoch zero", metainternalversion.ListOptions{ResourceVersion: "7"}, apierrors.IsResourceExpired},
		{"unparsable", metainternalversion.ListOptions{ResourceVersion: "x7"}, apierrors.IsResourceExpired},
		{"future", metainternalversion.ListOptions{ResourceVersion: f(cur + 1)}, storage.IsTooLargeResourceVersion},
		{"watch-list other epoch", metainternalversion.ListOptions{ResourceVersion: f(uint64(otherEpoch)<<32 | 2), SendInitialEvents: ptr(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, apierrors.IsResourceExpired},
		{"watch-list future", metainternalversion.ListOptions{ResourceVersion: f(cur + 5), SendInitialEvents: ptr(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, storage.IsTooLargeResourceVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := s.Watch(context.Background(), &tt.opts)
			if err == nil {
				w.Stop()
				t.Fatal("watch started, want an error")
			}
			if !tt.check(err) {
				t.Fatalf("unexpected error %v", err)
			}
		})
	}
	if n := watcherCount(s); n != 0 {
		t.Fatalf("%d watchers registered by failed calls", n)
	}
	// The oldest servable RV still works: the last compacted one.
	w := startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: f(s.compactedRV)})
	expectEvents(t, w, ev{watch.Modified, "a", "2"}, ev{watch.Modified, "a", "3"}, ev{watch.Modified, "a", "4"})
	// A watch-list from a past RV of this epoch serves the current state.
	wl := startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: f(early), SendInitialEvents: ptr(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	expectEvents(t, wl, ev{watch.Added, "a", "4"})
}

func TestWatchSelectorTransitions(t *testing.T) {
	s := newWidgetStore(t, nil)
	mustReplace(t, s, objs(wid("a", "blue", "team", "x"), wid("b", "red", "team", "x")))
	tests := []struct {
		name string
		opts metainternalversion.ListOptions
	}{
		{"field selector", metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.color", "red")}},
		{"label and field selector", metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "x"}), FieldSelector: fields.OneTermEqualSelector("spec.color", "red")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWatch(t, s, &tt.opts)
			expectEvents(t, w, ev{watch.Added, "b", "red"}) // initial state, filtered

			steps := []struct {
				set  []*Widget
				want []ev
			}{
				{[]*Widget{wid("a", "red", "team", "x"), wid("b", "red", "team", "x")}, []ev{{watch.Added, "a", "red"}}},               // starts matching
				{[]*Widget{wid("a", "red", "team", "x", "v", "2"), wid("b", "red", "team", "x")}, []ev{{watch.Modified, "a", "red"}}},  // still matching
				{[]*Widget{wid("a", "red", "team", "x", "v", "2"), wid("b", "green", "team", "x")}, []ev{{watch.Deleted, "b", "red"}}}, // stops matching: last matching content
				{[]*Widget{wid("a", "red", "team", "x", "v", "2"), wid("b", "pink", "team", "x")}, nil},                                // change outside the selection
				{[]*Widget{wid("b", "pink", "team", "x")}, []ev{{watch.Deleted, "a", "red"}}},                                          // deleted while matching
				{[]*Widget{wid("a", "blue", "team", "x"), wid("b", "red", "team", "x")}, []ev{{watch.Added, "b", "red"}}},              // back to the start
			}
			for i, st := range steps {
				before := s.ResourceVersion()
				mustReplace(t, s, objs(st.set...))
				for _, e := range expectEvents(t, w, st.want...) {
					if rv := rvOf(t, e.Object); rv <= before || rv > s.ResourceVersion() {
						t.Fatalf("step %d: %s carries RV %d, want the event's RV in (%d, %d]", i, e.Type, rv, before, s.ResourceVersion())
					}
				}
			}
			// Nothing extra was emitted for the non-matching change.
			mustReplace(t, s, objs(wid("a", "blue", "team", "x"), wid("b", "red", "team", "x"), sentinel("red")))
			expectEvents(t, w, ev{watch.Added, "zz-sentinel", "red"})
			mustReplace(t, s, objs(wid("a", "blue", "team", "x"), wid("b", "red", "team", "x")))
			expectEvents(t, w, ev{watch.Deleted, "zz-sentinel", "red"})
		})
	}
}
