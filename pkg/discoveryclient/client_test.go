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

package discoveryclient

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned/fake"
)

func res(name, kind string, scope apidiscoveryv2.ResourceScope, group, version string, subs ...apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{
		Resource: name, SingularResource: name[:len(name)-1], Scope: scope,
		ResponseKind: &metav1.GroupVersionKind{Group: group, Version: version, Kind: kind},
		Verbs:        []string{"get", "list", "watch"},
		Subresources: subs,
	}
}

// padObject is a merged document: core v1 in /api; apps/v1; example.com
// with v2 (first, so preferred) and v1, a resource only in v1; stale.io/v1
// marked Stale.
func padObject(rv string) *v1alpha1.PeerAggregatedDiscovery {
	pods := res("pods", "Pod", apidiscoveryv2.ScopeNamespace, "", "v1",
		apidiscoveryv2.APISubresourceDiscovery{Subresource: "status", ResponseKind: &metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Verbs: []string{"get", "patch", "update"}},
		apidiscoveryv2.APISubresourceDiscovery{Subresource: "log", ResponseKind: &metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Verbs: []string{"get"}})
	pods.ShortNames = []string{"po"}
	pods.Categories = []string{"all"}
	nodes := res("nodes", "Node", apidiscoveryv2.ScopeCluster, "", "v1")
	widgetsV2 := res("widgets", "Widget", apidiscoveryv2.ScopeNamespace, "example.com", "v2")
	widgetsV2.ShortNames = []string{"wd"}
	return &v1alpha1.PeerAggregatedDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PeerAggregatedDiscoveryName, ResourceVersion: rv},
		Status: v1alpha1.PeerAggregatedDiscoveryStatus{
			API: v1alpha1.DiscoveryDocument{ETag: "api-" + rv, Items: []apidiscoveryv2.APIGroupDiscovery{{
				Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{pods, nodes}}},
			}}},
			APIs: v1alpha1.DiscoveryDocument{ETag: "apis-" + rv, Items: []apidiscoveryv2.APIGroupDiscovery{
				{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
					res("deployments", "Deployment", apidiscoveryv2.ScopeNamespace, "apps", "v1"),
				}}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "example.com"}, Versions: []apidiscoveryv2.APIVersionDiscovery{
					{Version: "v2", Resources: []apidiscoveryv2.APIResourceDiscovery{widgetsV2}},
					{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
						res("widgets", "Widget", apidiscoveryv2.ScopeNamespace, "example.com", "v1"),
						res("gadgets", "Gadget", apidiscoveryv2.ScopeCluster, "example.com", "v1"),
					}},
				}},
				{ObjectMeta: metav1.ObjectMeta{Name: "stale.io"}, Versions: []apidiscoveryv2.APIVersionDiscovery{
					{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessStale, Resources: []apidiscoveryv2.APIResourceDiscovery{
						res("olds", "Old", apidiscoveryv2.ScopeCluster, "stale.io", "v1"),
					}},
				}},
			}},
		},
	}
}

// fallbackDiscovery is one server's own discovery: core v1 pods only.
func fallbackDiscovery() *fakediscovery.FakeDiscovery {
	return &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{{
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "list"}}},
	}}}}
}

func started(t *testing.T, objs ...runtime.Object) (*Client, *fake.Clientset, *fakediscovery.FakeDiscovery) {
	t.Helper()
	cs := fake.NewSimpleClientset(objs...)
	fd := fallbackDiscovery()
	c := NewForClients(cs, fd)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	_ = c.WaitForSync(wctx)
	return c, cs, fd
}

func find(lists []*metav1.APIResourceList, gv, name string) *metav1.APIResource {
	for _, l := range lists {
		if l.GroupVersion != gv {
			continue
		}
		for i := range l.APIResources {
			if l.APIResources[i].Name == name {
				return &l.APIResources[i]
			}
		}
	}
	return nil
}

func TestConversion(t *testing.T) {
	c, _, _ := started(t, padObject("1"))
	if err := c.WaitForSync(context.Background()); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	if c.Complete() {
		t.Error("Complete() with a stale GroupVersion")
	}

	gl, err := c.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range gl.Groups {
		names = append(names, g.Name+"@"+g.PreferredVersion.GroupVersion)
	}
	// Core first, then /apis in merged order; the stale group has no
	// preferred version (client-go's conversion).
	if want := []string{"@v1", "apps@apps/v1", "example.com@example.com/v2", "stale.io@"}; !reflect.DeepEqual(names, want) {
		t.Errorf("groups = %v, want %v", names, want)
	}
	if v := gl.Groups[2].Versions; len(v) != 2 || v[0].Version != "v2" || v[1].Version != "v1" {
		t.Errorf("example.com versions = %v", v)
	}

	groups, lists, err := c.ServerGroupsAndResources()
	var gdf *discovery.ErrGroupDiscoveryFailed
	if !errors.As(err, &gdf) || gdf.Groups[schema.GroupVersion{Group: "stale.io", Version: "v1"}] == nil {
		t.Fatalf("err = %v, want ErrGroupDiscoveryFailed for stale.io/v1", err)
	}
	if IsFallback(err) {
		t.Fatalf("merged view reported as fallback: %v", err)
	}
	if len(groups) != 4 {
		t.Errorf("%d groups", len(groups))
	}
	var gvs []string
	for _, l := range lists {
		gvs = append(gvs, l.GroupVersion)
	}
	if want := []string{"v1", "apps/v1", "example.com/v2", "example.com/v1"}; !reflect.DeepEqual(gvs, want) {
		t.Errorf("lists = %v, want %v", gvs, want)
	}
	pods := find(lists, "v1", "pods")
	if pods == nil || !pods.Namespaced || pods.Kind != "Pod" || !reflect.DeepEqual(pods.ShortNames, []string{"po"}) ||
		!reflect.DeepEqual(pods.Categories, []string{"all"}) || pods.SingularName != "pod" {
		t.Errorf("pods = %+v", pods)
	}
	st := find(lists, "v1", "pods/status")
	if st == nil || !st.Namespaced || st.Kind != "Pod" || !reflect.DeepEqual(st.Verbs, metav1.Verbs{"get", "patch", "update"}) {
		t.Errorf("pods/status = %+v", st)
	}
	if lg := find(lists, "v1", "pods/log"); lg == nil || !reflect.DeepEqual(lg.Verbs, metav1.Verbs{"get"}) {
		t.Errorf("pods/log = %+v", lg)
	}
	if n := find(lists, "v1", "nodes"); n == nil || n.Namespaced {
		t.Errorf("nodes = %+v", n)
	}
	if g := find(lists, "example.com/v1", "gadgets"); g == nil || g.Namespaced || g.Kind != "Gadget" {
		t.Errorf("gadgets = %+v", g)
	}

	// Same answer as client-go's own conversion of the same document.
	obj := padObject("1")
	items := append(append([]apidiscoveryv2.APIGroupDiscovery{}, obj.Status.API.Items...), obj.Status.APIs.Items...)
	wantGL, wantByGV, _ := discovery.SplitGroupsAndResources(apidiscoveryv2.APIGroupDiscoveryList{Items: items})
	if !reflect.DeepEqual(gl, wantGL) {
		t.Errorf("groups differ from client-go's conversion")
	}
	for gv, l := range wantByGV {
		got, err := c.ServerResourcesForGroupVersion(gv.String())
		if err != nil || !reflect.DeepEqual(got, l) {
			t.Errorf("%s: %v %v", gv, got, err)
		}
	}
	if _, err := c.ServerResourcesForGroupVersion("stale.io/v1"); !errors.As(err, new(discovery.StaleGroupVersionError)) {
		t.Errorf("stale GV err = %v", err)
	}
	if _, err := c.ServerResourcesForGroupVersion("nope/v1"); err == nil {
		t.Error("unknown GV: no error")
	}

	// Preferred: widgets from v2 (first version), gadgets from v1 (only there).
	pref, err := c.ServerPreferredResources()
	if !errors.As(err, &gdf) {
		t.Errorf("preferred err = %v", err)
	}
	if find(pref, "example.com/v2", "widgets") == nil || find(pref, "example.com/v1", "widgets") != nil ||
		find(pref, "example.com/v1", "gadgets") == nil || find(pref, "v1", "pods/status") != nil {
		t.Errorf("preferred = %s", dump(pref))
	}
	ns, _ := c.ServerPreferredNamespacedResources()
	if find(ns, "v1", "pods") == nil || find(ns, "v1", "nodes") != nil || find(ns, "example.com/v1", "gadgets") != nil {
		t.Errorf("preferred namespaced = %s", dump(ns))
	}
	// client-go's generic helpers over the AggregatedDiscoveryInterface agree.
	pref2, _ := discovery.ServerPreferredResources(c)
	if dump(pref) != dump(pref2) {
		t.Errorf("preferred %s != client-go's %s", dump(pref), dump(pref2))
	}
}

func dump(lists []*metav1.APIResourceList) string {
	var out []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			out = append(out, l.GroupVersion+":"+r.Name)
		}
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}
