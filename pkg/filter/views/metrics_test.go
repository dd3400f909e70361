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

package views

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
)

// TestInformerInputStamped: a list and every watch event, bookmarks
// included, stamp the informer's last input time.
func TestInformerInputStamped(t *testing.T) {
	metrics.Register()
	// A label of its own per run: the registry outlives a run (-count).
	resource := fmt.Sprintf("test-input-stamps-%d", time.Now().UnixNano())
	gauge := func() float64 {
		t.Helper()
		families, err := legacyregistry.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "peerdiscovery_filter_informer_last_input_timestamp_seconds" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "resource" && l.GetValue() == resource {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return 0
	}
	f := newFakeLW(&v1alpha1.APIServerPeerList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}})
	lw := stampInput(&cache.ListWatch{ListFunc: f.List, WatchFunc: f.Watch}, resource)
	if g := gauge(); g != 0 {
		t.Fatalf("stamped %v before any input", g)
	}
	since := func(g float64, t0 time.Time) bool { return g >= float64(t0.UnixNano())/1e9 }
	listed := time.Now()
	if _, err := lw.ListFunc(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := gauge(); !since(g, listed) {
		t.Fatalf("after the list: %v, want at least %v", g, listed)
	}
	w, err := lw.WatchFunc(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	time.Sleep(10 * time.Millisecond)
	bookmarked := time.Now()
	go f.w.Action(watch.Bookmark, &v1alpha1.APIServerPeer{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}})
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("event %v passed on, want the bookmark", ev.Type)
	}
	if g := gauge(); !since(g, bookmarked) {
		t.Errorf("after a bookmark: %v, want at least %v", g, bookmarked)
	}
}
