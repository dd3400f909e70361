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
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

// TestEnginePacesDiscovery: within the publish period, routes follow every
// new document at once while the merged discovery stays as published; at
// the period's end only the latest discovery goes out.
func TestEnginePacesDiscovery(t *testing.T) {
	opts := testOptions()
	opts.DiscoveryPublishPeriod = 2 * time.Second
	h := newHarness(t, opts, seed{kube: []runtime.Object{regLease(idA, epA, "", t0)}})
	h.scraper.set(epA, serve(document("v1.37.2", grp("first.example.com", ver("v1", "ones")))))
	h.start()
	first := h.pub.waitFor(t, "a ready, its discovery published", func(v compute.Output) bool {
		return isReady(v, idA) && hasGroupVersion(v, "first.example.com", "v1")
	})
	from := h.pub.count()

	// Two documents in a row; a CRD created makes the engine read every
	// peer at once, without moving the clock.
	apis := []apidiscoveryv2.APIGroupDiscovery{grp("first.example.com", ver("v1", "ones"))}
	for _, g := range []string{"second.example.com", "third.example.com"} {
		apis = append(apis, grp(g, ver("v1", "things")))
		doc := document("v1.37.2", apis...)
		h.scraper.set(epA, serve(doc))
		if _, err := h.ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx(),
			crd("crd."+g, "widgets", map[string]bool{"v1": true}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		v := h.pub.waitFor(t, g+" routed", func(v compute.Output) bool { return routedGV(v, g, "v1") })
		if v.Discovery.Status.APIs.ETag != first.Discovery.Status.APIs.ETag {
			t.Fatalf("routes to %s published with a new discovery inside the period:\n%s", g, describe(v))
		}
	}

	h.clk.Step(opts.DiscoveryPublishPeriod)
	last := h.pub.waitFor(t, "the latest discovery at the period's end", func(v compute.Output) bool {
		return hasGroupVersion(v, "third.example.com", "v1")
	})
	if !hasGroupVersion(last, "second.example.com", "v1") {
		t.Errorf("the published discovery lacks second.example.com:\n%s", describe(last))
	}
	etags := map[string]bool{}
	for _, v := range h.pub.since(from) {
		etags[v.Discovery.Status.APIs.ETag] = true
	}
	if len(etags) != 2 {
		t.Errorf("%d different discoveries published from the first on, want 2 (the first and the latest): the one in between was published", len(etags))
	}
}

// TestEngineSpacesReadsOfAPeer: CRDs created one after another each ask
// for a read of every peer; a peer read less than MinScrapeInterval ago is
// read again only when the interval ends, once for all those asks.
func TestEngineSpacesReadsOfAPeer(t *testing.T) {
	opts := testOptions()
	opts.MinScrapeInterval = time.Second
	h := newHarness(t, opts, seed{kube: []runtime.Object{regLease(idA, epA, "", t0)}})
	groups := []string{"one.example.com", "two.example.com", "three.example.com"}
	var apis []apidiscoveryv2.APIGroupDiscovery
	for _, g := range groups {
		apis = append(apis, grp(g, ver("v1", "widgets")))
	}
	h.scraper.set(epA, serve(document("v1.37.2", apis...)))
	h.start()
	h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	n := len(h.scraper.callsTo(epA))

	for _, g := range groups {
		if _, err := h.ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx(),
			crd(g, "widgets", map[string]bool{"v1": true}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Routes follow the CRD without a read; the read it asked for
		// waits for the interval.
		h.pub.waitFor(t, g+"'s route cluster-wide", func(v compute.Output) bool {
			rt := routeOf(v, "widgets.v1."+g)
			return rt != nil && rt.Status.ClusterWide
		})
	}
	time.Sleep(100 * time.Millisecond)
	if got := len(h.scraper.callsTo(epA)); got != n {
		t.Fatalf("%d reads of a within the interval after its last, want none", got-n)
	}
	h.clk.Step(opts.MinScrapeInterval)
	h.waitCalls(epA, n+1)
	// The asks made while that read waited make one more read, one
	// interval later.
	h.clk.Step(opts.MinScrapeInterval)
	h.waitCalls(epA, n+2)
	time.Sleep(100 * time.Millisecond)
	h.clk.Step(opts.MinScrapeInterval)
	time.Sleep(100 * time.Millisecond)
	if got := len(h.scraper.callsTo(epA)); got != n+2 {
		t.Errorf("%d reads of a for three CRDs, want 2 (one at the interval's end, one for the asks it covered)", got-n)
	}
}
