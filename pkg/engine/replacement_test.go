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
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// A new identity at an endpoint retires the older one there at once: no
// tombstone, no route naming it, one Event.
func TestEngineSameEndpointNewIdentity(t *testing.T) {
	const idC = "kube-apiserver-c"
	docC := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	notNamed := func(v compute.Output, id string) bool {
		if peerOf(v, id) != nil {
			return false
		}
		for _, r := range v.Routes {
			for _, p := range r.Status.Peers {
				if p.ServerID == id {
					return false
				}
			}
		}
		return true
	}

	t.Run("while running", func(t *testing.T) {
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
		from := h.pub.count()

		// a restarts under a new ID before its old Lease lapsed.
		h.clk.Step(time.Second)
		h.scraper.set(epA, serve(docC))
		if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Create(ctx(), regLease(idC, epA, "v1.37.2", h.clk.Now()), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		v := h.pub.waitFor(t, "c ready", func(v compute.Output) bool { return isReady(v, idC) })
		if !notNamed(v, idA) || routeOf(v, "things.v1.only-a.example.com") != nil {
			t.Errorf("a is still known:\n%s", describe(v))
		}
		for i, v := range h.pub.since(from) {
			if p := peerOf(v, idA); p != nil && p.Status.LeftTime != nil {
				t.Fatalf("view %d tombstones a:\n%s", i, describe(v))
			}
			total := 0
			for _, p := range v.Peers {
				if p.Status.LeftTime == nil {
					total++
				}
			}
			if rt := routeOf(v, "deployments.v1.apps"); rt != nil && rt.Status.TotalPeers != int32(total) || total > 2 {
				t.Fatalf("view %d counts a and c both:\n%s", i, describe(v))
			}
		}
		want := []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Normal " + ReasonReplaced}
		if got := h.eventsFor(idA); !slices.Equal(got, want) {
			t.Errorf("events of a: %v, want %v", got, want)
		}
		// Still so at the next refresh, and after a's old Lease departs.
		if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, t0.Add(time.Second), docA()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		h.refresh(epA)
		v = h.pub.waitFor(t, "c re-read", func(v compute.Output) bool { return peerOf(v, idC).Status.LastSyncTime.Time.Equal(h.clk.Now()) })
		if !notNamed(v, idA) {
			t.Errorf("a came back:\n%s", describe(v))
		}
		if got := h.eventsFor(idA); !slices.Equal(got, want) {
			t.Errorf("events of a: %v, want %v", got, want)
		}
	})

	t.Run("replica started later", func(t *testing.T) {
		old := departed(t, idA, epA, t0.Add(-time.Minute), t0.Add(-30*time.Second), docA())
		old.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour)))
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{old, regLease(idC, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docC))
		h.scraper.set(epB, serve(docB()))
		h.start()
		v := h.pub.waitFor(t, "b and c ready", func(v compute.Output) bool { return isReady(v, idB) && isReady(v, idC) })
		if !notNamed(v, idA) || len(v.Peers) != 2 {
			t.Errorf("a is known:\n%s", describe(v))
		}
		if got := h.eventsFor(idA); len(got) != 0 {
			t.Errorf("events of a: %v", got)
		}
	})

	// A server renamed and renamed back: the live identity wins over the
	// departed one even though its Lease was acquired earlier, and the
	// departed one is not counted beside it.
	t.Run("live beats a newer departed identity", func(t *testing.T) {
		renamed := departed(t, idC, epA, t0.Add(-time.Minute), t0.Add(-30*time.Second), docC)
		live := regLease(idA, epA, "v1.37.2", t0)
		live.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour)))
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{renamed, live, regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		v := h.pub.waitFor(t, "a and b ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
		if !notNamed(v, idC) || len(v.Peers) != 2 {
			t.Errorf("the departed identity at a's endpoint is still counted:\n%s", describe(v))
		}
	})

	// Which one is older comes from the Leases: acquireTime, then
	// renewTime, then the name.
	for _, tc := range []struct {
		name                  string
		acquireA, acquireC    time.Time
		renewA, renewC        time.Time
		wantKept, wantRetired string
	}{
		{"later acquireTime wins", t0.Add(-time.Minute), t0.Add(-2 * time.Minute), t0, t0, idA, idC},
		{"same acquireTime: later renewTime wins", t0, t0, t0.Add(-time.Second), t0, idC, idA},
		{"all equal: the greater name wins", t0, t0, t0, t0, idC, idA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, c := regLease(idA, epA, "", tc.renewA), regLease(idC, epA, "", tc.renewC)
			a.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(tc.acquireA))
			c.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(tc.acquireC))
			h := newHarness(t, testOptions(), seed{kube: []runtime.Object{a, c}})
			h.scraper.set(epA, serve(docC))
			h.start()
			v := h.pub.waitFor(t, tc.wantKept+" ready", func(v compute.Output) bool { return isReady(v, tc.wantKept) })
			if !notNamed(v, tc.wantRetired) || len(v.Peers) != 1 {
				t.Errorf("want only %s:\n%s", tc.wantKept, describe(v))
			}
		})
	}
}
