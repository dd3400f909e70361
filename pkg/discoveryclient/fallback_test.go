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
	"sync/atomic"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/restmapper"
	clienttesting "k8s.io/client-go/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned/fake"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

func TestWatchUpdatesAndFresh(t *testing.T) {
	c, cs, _ := started(t, padObject("1"))
	if _, _, err := c.ServerGroupsAndResources(); !errors.As(err, new(*discovery.ErrGroupDiscoveryFailed)) {
		t.Fatal(err)
	}
	if !c.Fresh() {
		t.Error("not Fresh after reading the current view")
	}
	obj := padObject("2")
	obj.Status.APIs.Items = append(obj.Status.APIs.Items[:2], apidiscoveryv2.APIGroupDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: "new.io"},
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
			res("things", "Thing", apidiscoveryv2.ScopeNamespace, "new.io", "v1")}}},
	})
	if err := cs.Tracker().Update(v1alpha1.SchemeGroupVersion.WithResource("peeraggregateddiscoveries"), obj, ""); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the update", func() bool { _, apis := c.ETags(); return apis == "apis-2" })
	if c.Fresh() {
		t.Error("Fresh although the view changed since the last read")
	}
	_, lists, err := c.ServerGroupsAndResources()
	if err != nil || find(lists, "new.io/v1", "things") == nil || find(lists, "stale.io/v1", "olds") != nil {
		t.Fatalf("after update: %v %s", err, dump(lists))
	}
	if !c.Fresh() || !c.Complete() {
		t.Errorf("Fresh=%v Complete=%v after reading the new view", c.Fresh(), c.Complete())
	}
	// Invalidate keeps the merged view (the watch keeps it current).
	c.Invalidate()
	if _, _, err := c.ServerGroupsAndResources(); err != nil {
		t.Errorf("after Invalidate: %v", err)
	}
}

func TestFallbackWhenObjectMissing(t *testing.T) {
	c, cs, fd := started(t)
	err := c.WaitForSync(context.Background())
	var fe *FallbackError
	if !errors.As(err, &fe) || !errors.Is(err, ErrObjectMissing) {
		t.Fatalf("WaitForSync = %v, want FallbackError(ErrObjectMissing)", err)
	}
	gs, rs, err := c.ServerGroupsAndResources()
	if !errors.As(err, &fe) || !errors.Is(fe.Reason, ErrObjectMissing) {
		t.Fatalf("err = %v", err)
	}
	if len(gs) != 1 || find(rs, "v1", "pods") == nil {
		t.Fatalf("fallback results = %v %s", gs, dump(rs))
	}
	if _, err := c.ServerGroups(); !IsFallback(err) {
		t.Errorf("ServerGroups err = %v", err)
	}
	if _, err := c.ServerPreferredResources(); !IsFallback(err) {
		t.Errorf("ServerPreferredResources err = %v", err)
	}
	if l, err := c.ServerResourcesForGroupVersion("v1"); !IsFallback(err) || l == nil {
		t.Errorf("ServerResourcesForGroupVersion = %v, %v", l, err)
	}
	if c.Complete() {
		t.Error("Complete while falling back")
	}

	// Invalidate drops the fallback cache: the next read asks the server.
	before := len(fd.Actions())
	_, _, _ = c.ServerGroupsAndResources()
	if n := len(fd.Actions()); n != before {
		t.Errorf("warm fallback read made %d requests", n-before)
	}
	c.Invalidate()
	_, _, _ = c.ServerGroupsAndResources()
	if len(fd.Actions()) == before {
		t.Error("read after Invalidate did not refetch")
	}

	// The object appears: merged view; it is deleted: fallback again.
	gvr := v1alpha1.SchemeGroupVersion.WithResource("peeraggregateddiscoveries")
	if err := cs.Tracker().Add(padObject("5")); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the merged view", func() bool { _, apis := c.ETags(); return apis == "apis-5" })
	if _, _, err := c.ServerGroupsAndResources(); IsFallback(err) {
		t.Fatalf("still falling back: %v", err)
	}
	if err := cs.Tracker().Delete(gvr, "", v1alpha1.PeerAggregatedDiscoveryName); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the fallback", func() bool {
		return !c.Complete() && func() bool { _, err := c.ServerGroups(); return IsFallback(err) }()
	})
	if _, err := c.ServerGroups(); !errors.Is(err, ErrObjectMissing) {
		t.Errorf("after delete: %v", err)
	}
}

func TestFallbackWhenUnavailable(t *testing.T) {
	cs := fake.NewSimpleClientset()
	var fail atomic.Bool
	fail.Store(true)
	unavailable := apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
	cs.PrependReactor("list", "peeraggregateddiscoveries", func(clienttesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, unavailable
		}
		return false, nil, nil
	})
	cs.PrependWatchReactor("peeraggregateddiscoveries", func(clienttesting.Action) (bool, watch.Interface, error) {
		if fail.Load() {
			return true, nil, unavailable
		}
		return false, nil, nil
	})
	c := NewForClients(cs, fallbackDiscovery())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Start(ctx)
	err := c.WaitForSync(ctx)
	if !IsFallback(err) || !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("WaitForSync = %v, want a FallbackError wrapping 503", err)
	}
	gs, _, err := c.ServerGroupsAndResources()
	if !IsFallback(err) || len(gs) == 0 {
		t.Fatalf("ServerGroupsAndResources = %v, %v", gs, err)
	}
	// Back: the informer relists and the merged view is used.
	if err := cs.Tracker().Add(padObject("7")); err != nil {
		t.Fatal(err)
	}
	fail.Store(false)
	poll.Eventually(t, "recovery", func() bool { _, apis := c.ETags(); return apis == "apis-7" })
	if _, err := c.ServerGroups(); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}

func TestNotStarted(t *testing.T) {
	c := NewForClients(fake.NewSimpleClientset(padObject("1")), fallbackDiscovery())
	_, err := c.ServerGroups()
	if !errors.Is(err, ErrNotStarted) || !IsFallback(err) {
		t.Fatalf("err = %v", err)
	}
	if err := c.WaitForSync(context.Background()); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("WaitForSync = %v", err)
	}
}

func TestStopFallsBack(t *testing.T) {
	cs := fake.NewSimpleClientset(padObject("1"))
	c := NewForClients(cs, fallbackDiscovery())
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	poll.Eventually(t, "fallback after stop", func() bool { _, err := c.ServerGroups(); return errors.Is(err, ErrNotStarted) })
}

func TestDeferredDiscoveryRESTMapper(t *testing.T) {
	c, _, _ := started(t, padObject("1"))
	m := restmapper.NewDeferredDiscoveryRESTMapper(c)
	// Kind Gadget is only in the merged view, not in the server's own.
	mapping, err := m.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Gadget"})
	if err != nil {
		t.Fatal(err)
	}
	if mapping.Resource != (schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}) || mapping.Scope.Name() != "root" {
		t.Errorf("mapping = %+v", mapping)
	}
	// The preferred version wins for a kind served in two versions.
	mapping, err = m.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Widget"})
	if err != nil || mapping.Resource.Version != "v2" {
		t.Errorf("Widget mapping = %+v, %v", mapping, err)
	}
	if gvr, err := m.ResourceFor(schema.GroupVersionResource{Resource: "wd"}); err == nil {
		t.Logf("short name wd resolves through ResourceFor: %v", gvr)
	}
}

func TestFallbackMapperSeesMergedViewLater(t *testing.T) {
	c, cs, _ := started(t)
	m := restmapper.NewDeferredDiscoveryRESTMapper(c)
	if _, err := m.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Gadget"}); err == nil {
		t.Fatal("Gadget mapped from the fallback")
	}
	if err := cs.Tracker().Add(padObject("3")); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "the merged view", func() bool { return c.Complete() || func() bool { _, a := c.ETags(); return a != "" }() })
	// Fresh is false (the view changed), so the mapper resets on the miss.
	if _, err := m.RESTMapping(schema.GroupKind{Group: "example.com", Kind: "Gadget"}); err != nil {
		t.Fatalf("after the merged view arrived: %v", err)
	}
}
