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

package peerdiscovery

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
)

// readOnly is the storage of one read-only resource, with the interfaces
// the generic endpoint installer looks for.
type readOnly interface {
	rest.Getter
	rest.Lister
	rest.Watcher
	rest.Scoper
	rest.ShortNamesProvider
	rest.CategoriesProvider
	rest.SingularNameProvider
}

func storageOf(t *testing.T, v *testView, resource string) readOnly {
	t.Helper()
	s, ok := v.storage[resource].(readOnly)
	if !ok {
		t.Fatalf("%s: storage %T is not a read-only resource", resource, v.storage[resource])
	}
	return s
}

func TestStorageResources(t *testing.T) {
	v := newTestView(t)
	got := make([]string, 0, 4)
	for r := range v.storage {
		got = append(got, r)
	}
	slices.Sort(got)
	if want := []string{"apiserverpeers", "peeraggregateddiscoveries", "peerroutingtables", "routereviews"}; !slices.Equal(got, want) {
		t.Fatalf("resources %v, want %v", got, want)
	}
	for resource, want := range map[string]struct{ singular, short string }{
		"apiserverpeers":            {"apiserverpeer", "asp"},
		"peeraggregateddiscoveries": {"peeraggregateddiscovery", "pad"},
		"peerroutingtables":         {"peerroutingtable", "prt"},
	} {
		s := storageOf(t, v, resource)
		if s.NamespaceScoped() || s.GetSingularName() != want.singular || !slices.Equal(s.ShortNames(), []string{want.short}) || !slices.Equal(s.Categories(), []string{Category}) {
			t.Errorf("%s: namespaced %v, singular %q, short names %v, categories %v", resource, s.NamespaceScoped(), s.GetSingularName(), s.ShortNames(), s.Categories())
		}
		// Read-only: no write verb for the installer to serve.
		if _, ok := v.storage[resource].(rest.Creater); ok {
			t.Errorf("%s can be created", resource)
		}
		if _, ok := v.storage[resource].(rest.GracefulDeleter); ok {
			t.Errorf("%s can be deleted", resource)
		}
	}
	// RouteReview is create-only and in no category.
	review := v.storage["routereviews"]
	if _, ok := review.(rest.Creater); !ok {
		t.Error("routereviews cannot be created")
	}
	if _, ok := review.(rest.Lister); ok {
		t.Error("routereviews can be listed")
	}
	if _, ok := review.(rest.CategoriesProvider); ok {
		t.Error("routereviews is in a category")
	}
}

func TestGetListAndFieldSelectors(t *testing.T) {
	v := newTestView(t)
	ctx := context.Background()
	publish(t, v, testOutput(false))
	routes := storageOf(t, v, "peerroutingtables")

	obj, err := routes.Get(ctx, "deviceclasses.v1beta2.resource.k8s.io", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt := obj.(*api.PeerRoutingTable); rt.Spec.Resource != "deviceclasses" || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].ServerID != "a" {
		t.Fatalf("deviceclasses: %+v", rt)
	}
	if _, err := routes.Get(ctx, "nope.v1.core", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get of a missing table: %v, want NotFound", err)
	}

	list := func(r readOnly, selector string) []string {
		t.Helper()
		opts := &metainternalversion.ListOptions{}
		if selector != "" {
			opts.FieldSelector = fields.ParseSelectorOrDie(selector)
		}
		obj, err := r.List(ctx, opts)
		if err != nil {
			t.Fatalf("list %s: %v", selector, err)
		}
		var names []string
		switch l := obj.(type) {
		case *api.PeerRoutingTableList:
			for _, i := range l.Items {
				names = append(names, i.Name)
			}
		case *api.APIServerPeerList:
			for _, i := range l.Items {
				names = append(names, i.Name)
			}
		case *api.PeerAggregatedDiscoveryList:
			for _, i := range l.Items {
				names = append(names, i.Name)
			}
		}
		slices.Sort(names)
		return names
	}
	for _, tc := range []struct {
		resource, selector string
		want               []string
	}{
		{"peerroutingtables", "", []string{"deviceclasses.v1beta2.resource.k8s.io", "pods.v1.core"}},
		{"peerroutingtables", "status.servedByAll=false", []string{"deviceclasses.v1beta2.resource.k8s.io"}},
		{"peerroutingtables", "spec.group=resource.k8s.io,spec.resource=deviceclasses", []string{"deviceclasses.v1beta2.resource.k8s.io"}},
		{"peerroutingtables", "metadata.name=pods.v1.core", []string{"pods.v1.core"}},
		{"apiserverpeers", "", []string{"a", "b"}},
		{"apiserverpeers", "status.ready=false", []string{"b"}},
		{"apiserverpeers", "spec.serverID=a", []string{"a"}},
		{"peeraggregateddiscoveries", "", []string{"cluster"}},
	} {
		if got := list(storageOf(t, v, tc.resource), tc.selector); !slices.Equal(got, tc.want) {
			t.Errorf("%s %q: %v, want %v", tc.resource, tc.selector, got, tc.want)
		}
	}
}

func TestWatchFollowsPublish(t *testing.T) {
	v := newTestView(t)
	ctx := context.Background()
	publish(t, v, testOutput(true))
	peers := storageOf(t, v, "apiserverpeers")
	l, err := peers.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := l.(*api.APIServerPeerList).ResourceVersion
	w, err := peers.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: rv, FieldSelector: fields.ParseSelectorOrDie("spec.serverID=b")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	publish(t, v, testOutput(false))
	select {
	case ev := <-w.ResultChan():
		obj := ev.Object
		if c, ok := obj.(runtime.CacheableObject); ok { // memstore shares one encoding per event
			obj = c.GetObject()
		}
		p, ok := obj.(*api.APIServerPeer)
		if ev.Type != watch.Modified || !ok || p.Spec.ServerID != "b" || apimeta.IsStatusConditionTrue(p.Status.Conditions, api.ConditionReady) {
			t.Fatalf("event %s %#v, want b modified to not ready", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event after publish")
	}
}

// The peer engine names its Events' objects with PeerUID: it must be the
// UID the stored APIServerPeer has, or kubectl describe finds no Events.
func TestPeerUIDIsTheStoredUID(t *testing.T) {
	v := newTestView(t)
	publish(t, v, testOutput(true))
	obj, err := storageOf(t, v, "apiserverpeers").Get(context.Background(), "a", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	accessor, err := apimeta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	if got := PeerUID("a"); accessor.GetUID() == "" || got != accessor.GetUID() {
		t.Errorf("PeerUID(a) = %q, the stored object's UID is %q", got, accessor.GetUID())
	}
}

// A routing table is the same object at one resourceVersion whatever the
// readiness of its peers: readiness is on the APIServerPeers only, so a
// peer turning not ready changes no routing table.
func TestRoutingTableDoesNotChangeWithReadiness(t *testing.T) {
	v := newTestView(t)
	ctx := context.Background()
	publish(t, v, testOutput(true))
	routes := storageOf(t, v, "peerroutingtables")
	before, err := routes.Get(ctx, "pods.v1.core", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := v.stores.Routes.ResourceVersion()
	publish(t, v, testOutput(false)) // b not ready
	after, err := routes.Get(ctx, "pods.v1.core", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.stores.Routes.ResourceVersion(); got != rv {
		t.Fatalf("routing tables changed (%d → %d) when only a peer's readiness did", rv, got)
	}
	if !equality.Semantic.DeepEqual(before, after) {
		t.Fatalf("one resourceVersion, two objects:\n%+v\n%+v", before, after)
	}
}

// TestReadsBeforeTheFirstViewAre503 is the replica restarted at an address
// still in the Service's endpoints: a filter that relists from it before
// its first view must get an error (its reflector keeps the routes it
// holds), never an empty list that deletes them.
func TestReadsBeforeTheFirstViewAre503(t *testing.T) {
	v := newTestView(t)
	ctx := context.Background()
	for _, resource := range []string{"peerroutingtables", "apiserverpeers", "peeraggregateddiscoveries"} {
		r := storageOf(t, v, resource)
		if _, err := r.List(ctx, &metainternalversion.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s: list before the first view: %v, want 503", resource, err)
		}
		if _, err := r.Get(ctx, "cluster", &metav1.GetOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s: get before the first view: %v, want 503", resource, err)
		}
		if _, err := r.Watch(ctx, &metainternalversion.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("%s: watch before the first view: %v, want 503", resource, err)
		}
	}
	publish(t, v, testOutput(false))
	obj, err := storageOf(t, v, "peerroutingtables").List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatalf("list after the first view: %v", err)
	}
	if n := len(obj.(*api.PeerRoutingTableList).Items); n == 0 {
		t.Fatal("list after the first view is empty")
	}
}
