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

package discoverychanges

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

// wrapped is kube-apiserver's own discovery manager, wrapped; changes
// counts what the wrapper told.
func wrapped(t *testing.T) (inner, rm aggregated.ResourceManager, changes *atomic.Int64) {
	t.Helper()
	inner = aggregated.NewResourceManager("apis")
	changes = &atomic.Int64{}
	rm, ok := Wrap(inner, func() { changes.Add(1) })
	if !ok {
		t.Fatal("Wrap could not follow kube-apiserver's discovery manager")
	}
	return inner, rm, changes
}

func version(v string, resources ...string) apidiscoveryv2.APIVersionDiscovery {
	d := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	for _, r := range resources {
		d.Resources = append(d.Resources, apidiscoveryv2.APIResourceDiscovery{Resource: r, Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get"}})
	}
	return d
}

// etag is what a client of /apis reads as the document's version.
func etag(t *testing.T, rm aggregated.ResourceManager) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/apis", nil)
	req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	w := httptest.NewRecorder()
	rm.ServeHTTP(w, req)
	if w.Code != http.StatusOK || w.Header().Get("ETag") == "" {
		t.Fatalf("/apis: %d, ETag %q", w.Code, w.Header().Get("ETag"))
	}
	return w.Header().Get("ETag")
}

// step is one call on the manager and whether it changed /apis.
type step struct {
	name    string
	call    func(rm aggregated.ResourceManager)
	changed bool
}

// TestWrapTellsChangesOnly walks the calls kube-apiserver makes and checks
// each against the document /apis serves: told when its ETag changed (once
// per call that changed it), never when it did not.
func TestWrapTellsChangesOnly(t *testing.T) {
	_, rm, changes := wrapped(t)
	agg := rm.WithSource(aggregated.AggregatorSource)
	gv := metav1.GroupVersion{Group: "wardle.example.com", Version: "v1"}
	// kube-aggregator's refresh of one APIService's discovery, as each
	// minute (discoveryManager.syncAPIService).
	refresh := func(v apidiscoveryv2.APIVersionDiscovery, group, ver int) func(aggregated.ResourceManager) {
		return func(aggregated.ResourceManager) {
			agg.AddGroupVersion(gv.Group, v)
			agg.SetGroupVersionPriority(gv, group, ver)
		}
	}
	steps := []step{
		{"a built-in group", func(rm aggregated.ResourceManager) { rm.AddGroupVersion("apps", version("v1", "deployments")) }, true},
		{"the same built-in group again", func(rm aggregated.ResourceManager) { rm.AddGroupVersion("apps", version("v1", "deployments")) }, false},
		{"an aggregated API's first refresh", refresh(version("v1", "flunders"), 100, 10), true},
		{"a refresh that finds nothing new", refresh(version("v1", "flunders"), 100, 10), false},
		{"a refresh that finds nothing new, again", refresh(version("v1", "flunders"), 100, 10), false},
		{"a refresh that finds a new resource", refresh(version("v1", "flunders", "fischers"), 100, 10), true},
		// Above the built-in group's (1000, the default): wardle moves first.
		{"a refresh that finds a new priority", refresh(version("v1", "flunders", "fischers"), 5000, 10), true},
		{"a refresh that finds nothing new after those", refresh(version("v1", "flunders", "fischers"), 5000, 10), false},
		{"a version removed", func(aggregated.ResourceManager) { agg.RemoveGroupVersion(gv) }, true},
		{"a version removed that is gone", func(aggregated.ResourceManager) { agg.RemoveGroupVersion(gv) }, false},
		{"the aggregated API back, with its old priority", refresh(version("v1", "flunders"), 5000, 10), true},
		{"a group removed", func(rm aggregated.ResourceManager) { rm.RemoveGroup("apps") }, true},
		{"groups replaced", func(rm aggregated.ResourceManager) {
			rm.SetGroups([]apidiscoveryv2.APIGroupDiscovery{{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Versions: []apidiscoveryv2.APIVersionDiscovery{version("v1", "jobs")}}})
		}, true},
	}
	last := etag(t, rm)
	for _, s := range steps {
		before := changes.Load()
		s.call(rm)
		told := changes.Load() - before
		now := etag(t, rm)
		if s.changed != (now != last) {
			t.Fatalf("%s: the test's expectation is wrong: /apis changed = %v", s.name, now != last)
		}
		switch {
		case s.changed && told == 0:
			t.Errorf("%s: /apis changed and the wrapper did not tell", s.name)
		case !s.changed && told != 0:
			t.Errorf("%s: /apis did not change and the wrapper told %d times", s.name, told)
		}
		last = now
	}
}

// TestWrapTellsBypassingCallers: a change made through the unwrapped
// manager is told too (the invalidation callback, outside any wrapped
// call), and a callback a user of the wrapper set still runs.
func TestWrapTellsBypassingCallers(t *testing.T) {
	inner, rm, changes := wrapped(t)
	var chained atomic.Int64
	rm.AddInvalidationCallback(func() { chained.Add(1) })
	inner.AddGroupVersion("apps", version("v1", "deployments"))
	if n := changes.Load(); n != 1 {
		t.Errorf("a change through the unwrapped manager was told %d times, want once", n)
	}
	rm.AddGroupVersion("batch", version("v1", "jobs"))
	if n := changes.Load(); n != 2 {
		t.Errorf("%d changes told after a second change, want 2", n)
	}
	if n := chained.Load(); n != 2 {
		t.Errorf("the chained invalidation callback ran %d times, want 2", n)
	}
}

// TestWrapUnderConcurrentRefreshes: kube-aggregator's two workers refresh
// APIServices while the CRD controller adds versions: each added version
// is told exactly once, whatever the interleaving, and no unchanged
// refresh is.
func TestWrapUnderConcurrentRefreshes(t *testing.T) {
	_, rm, changes := wrapped(t)
	agg := rm.WithSource(aggregated.AggregatorSource)
	crds := rm.WithSource(aggregated.CRDSource)
	const apiServices, refreshes, added = 8, 50, 100
	for i := range apiServices {
		agg.AddGroupVersion(fmt.Sprintf("agg%d.example.com", i), version("v1", "things"))
		agg.SetGroupVersionPriority(metav1.GroupVersion{Group: fmt.Sprintf("agg%d.example.com", i), Version: "v1"}, 100, 10)
	}
	base := changes.Load()
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for r := range refreshes {
				i := (w + 2*r) % apiServices
				g := fmt.Sprintf("agg%d.example.com", i)
				agg.AddGroupVersion(g, version("v1", "things"))
				agg.SetGroupVersionPriority(metav1.GroupVersion{Group: g, Version: "v1"}, 100, 10)
			}
		})
	}
	wg.Go(func() {
		for i := range added {
			crds.AddGroupVersion(fmt.Sprintf("crd%d.example.com", i), version("v1", "widgets"))
		}
	})
	wg.Wait()
	if n := changes.Load() - base; n != added {
		t.Fatalf("%d changes told for %d versions added among %d unchanged refreshes, want %d", n, added, 2*refreshes, added)
	}
}
