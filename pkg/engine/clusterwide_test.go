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

package engine

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

func TestEngineCRDClusterWide(t *testing.T) {
	h := newHarness(t, testOptions(), seed{
		kube: []runtime.Object{regLease(idA, epA, "", t0)},
		ext:  []runtime.Object{crd("stable.example.com", "crontabs", map[string]bool{"v1": true, "v2": false})},
	})
	h.scraper.set(epA, serve(document("v1.37.2", grp("stable.example.com", ver("v1", "crontabs"), ver("v2", "crontabs")))))
	h.start()
	v := h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	if rt := routeOf(v, "crontabs.v1.stable.example.com"); rt == nil || !rt.Status.ClusterWide || rt.Status.ClusterWideSource != compute.SourceCRD {
		t.Errorf("served CRD version: %+v", rt)
	}
	if rt := routeOf(v, "crontabs.v2.stable.example.com"); rt == nil || rt.Status.ClusterWide {
		t.Errorf("a version the CRD does not serve is not cluster-wide: %+v", rt)
	}

	// A CRD created while running re-reads every peer at once (no tick).
	h.scraper.set(epA, serve(document("v1.37.2",
		grp("stable.example.com", ver("v1", "crontabs"), ver("v2", "crontabs")),
		grp("other.example.com", ver("v1beta1", "widgets")))))
	if _, err := h.ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx(),
		crd("other.example.com", "widgets", map[string]bool{"v1beta1": true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v = h.pub.waitFor(t, "the new CRD's route", func(v compute.Output) bool {
		rt := routeOf(v, "widgets.v1beta1.other.example.com")
		return rt != nil && rt.Status.ClusterWide
	})
	if rt := routeOf(v, "widgets.v1beta1.other.example.com"); rt.Status.ClusterWideSource != compute.SourceCRD {
		t.Errorf("source %q", rt.Status.ClusterWideSource)
	}
}

func TestEngineCRDDeletedNeverResurrected(t *testing.T) {
	withCRD := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("stable.example.com", ver("v1", "crontabs")))
	// A peer that lags: it keeps answering the document with the CRD's GV,
	// in full (no 304), on every refresh.
	stale := func(context.Context, string, string) (Document, error) { return withCRD, nil }
	h := newHarness(t, testOptions(), seed{
		kube: []runtime.Object{regLease(idA, epA, "", t0), regLease(idB, epB, "", t0)},
		ext:  []runtime.Object{crd("stable.example.com", "crontabs", map[string]bool{"v1": true})},
	})
	h.scraper.set(epA, stale)
	h.scraper.set(epB, stale)
	h.start()
	h.pub.waitFor(t, "the CRD route", func(v compute.Output) bool {
		rt := routeOf(v, "crontabs.v1.stable.example.com")
		return rt != nil && rt.Status.ClusterWide && isReady(v, idA) && isReady(v, idB)
	})

	if err := h.ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx(), "crontabs.stable.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := func(v compute.Output) bool {
		return !routedGV(v, "stable.example.com", "v1") && !hasGroupVersion(v, "stable.example.com", "v1")
	}
	h.pub.waitFor(t, "the CRD's GV gone", gone)
	from := h.pub.count() - 1
	for i := 0; i < 3; i++ {
		h.refresh(epA)
		h.waitCalls(epB, i+3)
		h.pub.waitFor(t, "the refresh applied", func(v compute.Output) bool {
			return peerOf(v, idA).Status.LastSyncTime.Time.Equal(h.clk.Now()) && peerOf(v, idB).Status.LastSyncTime.Time.Equal(h.clk.Now())
		})
	}
	for i, v := range h.pub.since(from) {
		if !gone(v) {
			t.Fatalf("view %d after the deletion brings the deleted CRD's GV back:\n%s", i, describe(v))
		}
		if routeOf(v, "deployments.v1.apps") == nil || !hasGroupVersion(v, "apps", "v1") {
			t.Fatalf("view %d lost other GVs", i)
		}
	}
}

// A CRD created and deleted while a scrape started in between is still in
// flight: that scrape's document lists the GV, and must not bring it back.
func TestEngineCRDDeletedDuringScrape(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0), regLease(idB, epB, "", t0)}})
	h.scraper.set(epA, serve(document("v1.37.2")))
	// b lists v2 of the group all along, which makes the engine's view of
	// the CRD visible in its routes.
	h.scraper.set(epB, serve(document("v1.37.2", grp("stable.example.com", ver("v2", "crontabs")))))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })

	release, started := make(chan struct{}), make(chan struct{})
	h.scraper.set(epA, gated(release, started, document("v1.37.2",
		grp("stable.example.com", ver("v1", "crontabs"), ver("v2", "crontabs")),
		grp("extra.example.com", ver("v1", "extras")))))
	crds := h.ext.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx(), crd("stable.example.com", "crontabs", map[string]bool{"v1": true, "v2": true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.pub.waitFor(t, "the CRD seen", func(v compute.Output) bool {
		rt := routeOf(v, "crontabs.v2.stable.example.com")
		return rt != nil && rt.Status.ClusterWide
	})
	poll.Eventually(t, "a's scrape, started for the new CRD, in flight", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	if err := crds.Delete(ctx(), "crontabs.stable.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.pub.waitFor(t, "the deletion seen", func(v compute.Output) bool { return routeOf(v, "crontabs.v2.stable.example.com") == nil })
	from := h.pub.count() - 1
	close(release)
	h.pub.waitFor(t, "a's new document", func(v compute.Output) bool { return hasGroupVersion(v, "extra.example.com", "v1") })
	for i, v := range h.pub.since(from) {
		for _, ver := range []string{"v1", "v2"} {
			if routedGV(v, "stable.example.com", ver) || hasGroupVersion(v, "stable.example.com", ver) {
				t.Fatalf("view %d brings the deleted CRD's stable.example.com/%s back:\n%s", i, ver, describe(v))
			}
		}
	}
}

func TestEngineAPIServiceClusterWide(t *testing.T) {
	h := newHarness(t, testOptions(), seed{
		kube: []runtime.Object{regLease(idA, epA, "", t0)},
		agg:  []runtime.Object{apiService("metrics.k8s.io", "v1beta1", true), apiService("apps", "v1", false)},
	})
	h.scraper.set(epA, serve(document("v1.37.2",
		grp("apps", ver("v1", "deployments")),
		grp("metrics.k8s.io", ver("v1beta1", "pods", "nodes")))))
	h.start()
	v := h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	for _, name := range []string{"pods.v1beta1.metrics.k8s.io", "nodes.v1beta1.metrics.k8s.io"} {
		if rt := routeOf(v, name); rt == nil || !rt.Status.ClusterWide || rt.Status.ClusterWideSource != compute.SourceAPIService {
			t.Errorf("%s: %+v", name, rt)
		}
	}
	if rt := routeOf(v, "deployments.v1.apps"); rt == nil || rt.Status.ClusterWide {
		t.Errorf("a local APIService is not cluster-wide: %+v", rt)
	}

	// Deleting the APIService: its GV leaves, and a's document listing it
	// does not bring it back.
	if err := h.agg.ApiregistrationV1().APIServices().Delete(ctx(), "v1beta1.metrics.k8s.io", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.pub.waitFor(t, "metrics.k8s.io gone", func(v compute.Output) bool {
		return !routedGV(v, "metrics.k8s.io", "v1beta1") && !hasGroupVersion(v, "metrics.k8s.io", "v1beta1")
	})
	from := h.pub.count() - 1
	h.refresh(epA)
	h.pub.waitFor(t, "a re-synced", func(v compute.Output) bool { return peerOf(v, idA).Status.LastSyncTime.Time.Equal(h.clk.Now()) })
	for _, v := range h.pub.since(from) {
		if routedGV(v, "metrics.k8s.io", "v1beta1") {
			t.Fatal("the deleted APIService's GV came back")
		}
	}
}
