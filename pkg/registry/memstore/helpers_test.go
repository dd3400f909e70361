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
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/component-base/metrics/testutil"
)

const (
	testEpoch  = 0x1234567
	otherEpoch = 0x0abcdef
	// eventually bounds every wait; generous so slow CI never flakes.
	eventually = 20 * time.Second
)

func widgetConfig() Config {
	return Config{
		Resource:    widgetResource,
		NewFunc:     func() runtime.Object { return &Widget{} },
		NewListFunc: func() runtime.Object { return &WidgetList{} },
		AttrFunc:    widgetAttrs,
		Epoch:       testEpoch,
	}
}

func newWidgetStore(t testing.TB, mod func(*Config)) *Store {
	t.Helper()
	cfg := widgetConfig()
	if mod != nil {
		mod(&cfg)
	}
	s := New(cfg)
	t.Cleanup(s.Stop)
	return s
}

// wid builds a widget; kv are label key, value pairs.
func wid(name, color string, kv ...string) *Widget {
	w := &Widget{Spec: WidgetSpec{Color: color, Tags: []string{"t-" + name}}}
	w.Name = name
	if len(kv) > 0 {
		w.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			w.Labels[kv[i]] = kv[i+1]
		}
	}
	return w
}

func objs(ws ...*Widget) []runtime.Object {
	out := make([]runtime.Object, len(ws))
	for i, w := range ws {
		out[i] = w
	}
	return out
}

func listWidgets(t testing.TB, s *Store, opts *metainternalversion.ListOptions) *WidgetList {
	t.Helper()
	out, err := s.List(context.Background(), opts)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return out.(*WidgetList)
}

// state is name→color, to compare contents compactly.
func state(l *WidgetList) map[string]string {
	m := map[string]string{}
	for _, w := range l.Items {
		m[w.Name] = w.Spec.Color
	}
	return m
}

func rvOf(t testing.TB, obj runtime.Object) uint64 {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", m.GetResourceVersion(), err)
	}
	return rv
}

func listRV(t testing.TB, l *WidgetList) uint64 {
	t.Helper()
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// ev summarises an event for comparisons.
type ev struct {
	Type  watch.EventType
	Name  string
	Color string
}

func summarize(e watch.Event) ev {
	if w, ok := e.Object.(*Widget); ok {
		return ev{e.Type, w.Name, w.Spec.Color}
	}
	return ev{Type: e.Type}
}

func startWatch(t testing.TB, s *Store, opts *metainternalversion.ListOptions) watch.Interface {
	t.Helper()
	w, err := s.Watch(context.Background(), opts)
	if err != nil {
		t.Fatalf("Watch(%+v): %v", opts, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func next(t testing.TB, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed, wanted an event")
		}
		e.Object = Unwrap(e.Object)
		return e
	case <-time.After(eventually):
		t.Fatal("timed out waiting for a watch event")
	}
	return watch.Event{}
}

// nextNonBookmark skips periodic bookmarks.
func nextNonBookmark(t testing.TB, w watch.Interface) watch.Event {
	t.Helper()
	for {
		if e := next(t, w); e.Type != watch.Bookmark {
			return e
		}
	}
}

func expectEvents(t testing.TB, w watch.Interface, want ...ev) []watch.Event {
	t.Helper()
	var got []watch.Event
	for i, x := range want {
		e := nextNonBookmark(t, w)
		got = append(got, e)
		if s := summarize(e); s != x {
			t.Fatalf("event %d: got %+v, want %+v", i, s, x)
		}
	}
	return got
}

// expectClosed drains w until its channel closes and returns what it got.
func expectClosed(t testing.TB, w watch.Interface) []watch.Event {
	t.Helper()
	var got []watch.Event
	deadline := time.After(eventually)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return got
			}
			e.Object = Unwrap(e.Object)
			got = append(got, e)
		case <-deadline:
			t.Fatalf("watch not closed after %v (%d events drained)", eventually, len(got))
		}
	}
}

func watcherCount(s *Store) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.watchers)
}

func ptr[T any](v T) *T { return &v }

// terminatedCount reads the terminated-watchers counter of s's resource.
func terminatedCount(t testing.TB, s *Store) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(terminatedWatchers.WithLabelValues(s.resource.String()))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mustReplace is Replace that fails the test on an error.
func mustReplace(t testing.TB, s *Store, objs []runtime.Object) {
	t.Helper()
	if err := s.Replace(objs); err != nil {
		t.Fatal(err)
	}
}
