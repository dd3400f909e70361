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
	"reflect"
	"slices"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// docA is what a serves: a group and a cluster-scoped resource only it
// serves, and apps/v1 that b serves too (a's ID sorts first, so its scope
// is the shared routes' scope).
func docA() Document {
	cluster := grp("cluster-only.example.com", ver("v1"))
	cluster.Versions[0].Resources = []apidiscoveryv2.APIResourceDiscovery{{Resource: "globals", Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get"}}}
	return document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")), cluster)
}

func docB() Document { return document("v1.36.3", grp("apps", ver("v1", "deployments"))) }

// departed is a's registration lease as its filter leaves it on a graceful
// shutdown: renewed at renewed, departed at at, with what doc lists.
func departed(t *testing.T, id, endpoint string, renewed, at time.Time, doc Document) *coordinationv1.Lease {
	t.Helper()
	enc, err := peerlease.EncodeServed(peerlease.ServedFromDiscovery(doc.API, doc.APIs))
	if err != nil {
		t.Fatal(err)
	}
	return peerlease.MarkDeparted(regLease(id, endpoint, doc.Version, renewed), at, enc)
}

func leftAt(v compute.Output, id string) time.Time {
	p := peerOf(v, id)
	if p == nil || p.Status.LeftTime == nil {
		return time.Time{}
	}
	return p.Status.LeftTime.Time
}

// A replica started after a kube-apiserver departed publishes the same
// routing tables, and the same APIServerPeer for it, as a replica that
// read the server before it left; neither reads a departed server.
func TestEngineDepartedLeaseSameViewOnEveryReplica(t *testing.T) {
	departure := t0.Add(30 * time.Second)

	// The replica that knew a.
	h1 := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
	h1.scraper.set(epA, serve(docA()))
	h1.scraper.set(epB, serve(docB()))
	h1.start()
	h1.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
	// It notices the departure a minute after a recorded it.
	h1.clk.Step(time.Minute)
	h1.waitCalls(epB, 2)
	h1.waitCalls(epA, 2)
	if _, err := h1.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, departure, docA()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v1 := h1.pub.waitFor(t, "a left", func(v compute.Output) bool { return leftAt(v, idA).Equal(departure) })
	callsA := len(h1.scraper.callsTo(epA))
	h1.refresh(epB)
	v1 = h1.pub.waitFor(t, "b re-read", func(v compute.Output) bool {
		return peerOf(v, idB).Status.LastSyncTime.Time.Equal(h1.clk.Now())
	})
	if n := len(h1.scraper.callsTo(epA)); n != callsA {
		t.Errorf("a departed peer was read again (%d reads)", n-callsA)
	}

	// A replica started after the departure, at the same time.
	h2 := newHarness(t, testOptions(), seed{kube: []runtime.Object{departed(t, idA, epA, t0, departure, docA()), regLease(idB, epB, "v1.36.3", t0)}})
	h2.clk.SetTime(h1.clk.Now())
	h2.scraper.set(epA, serve(docA()))
	h2.scraper.set(epB, serve(docB()))
	h2.start()
	v2 := h2.pub.waitFor(t, "b ready, a known", func(v compute.Output) bool { return isReady(v, idB) && peerOf(v, idA) != nil })
	if calls := h2.scraper.callsTo(epA); len(calls) != 0 {
		t.Errorf("the new replica read a departed peer %d times", len(calls))
	}

	if !reflect.DeepEqual(v1.Routes, v2.Routes) {
		t.Errorf("routing tables differ:\nreplica that read a:\n%s\nreplica started later:\n%s", describe(v1), describe(v2))
	}
	// The status may differ in what the document says (the replica that
	// read a keeps its full document for discovery: counts, ETags); the
	// identity, readiness and left time may not. Only the leader publishes,
	// so replicas serve one of the two, whichever leads.
	if pa1, pa2 := peerOf(v1, idA), peerOf(v2, idA); !reflect.DeepEqual(pa1.Spec, pa2.Spec) ||
		!reflect.DeepEqual(pa1.Status.Conditions, pa2.Status.Conditions) || !reflect.DeepEqual(pa1.Status.LeftTime, pa2.Status.LeftTime) {
		t.Errorf("a's APIServerPeer differs:\n%+v\n%+v", pa1, pa2)
	}
	// And the tombstone is what a served.
	for _, name := range []string{"things.v1.only-a.example.com", "globals.v1.cluster-only.example.com"} {
		rt := routeOf(v2, name)
		if rt == nil || len(rt.Status.Peers) != 1 || !rt.Status.Peers[0].Left || rt.Status.Peers[0].Endpoint != epA {
			t.Errorf("%s: %+v", name, rt)
		}
	}
	if rt := routeOf(v2, "globals.v1.cluster-only.example.com"); rt != nil && rt.Spec.Scope != apidiscoveryv2.ScopeCluster {
		t.Errorf("globals scope %q", rt.Spec.Scope)
	}
	if rt := routeOf(v2, "deployments.v1.apps"); rt == nil || len(rt.Status.Peers) != 2 || !rt.Status.Peers[0].Left || !rt.Status.ServedByAll {
		t.Errorf("deployments: %+v", rt)
	}
	// Listed (stale) while the tombstone lasts, on both replicas.
	if !hasGroupVersion(v1, "only-a.example.com", "v1") || !hasGroupVersion(v2, "only-a.example.com", "v1") {
		t.Error("a departed peer's APIs left the merged discovery during its tombstone")
	}
	// Only the replica that saw a go says so.
	if got := h2.eventsFor(idA); len(got) != 0 {
		t.Errorf("the new replica recorded events for a: %v", got)
	}
	if got := h1.eventsFor(idA); !slices.Equal(got, []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Warning " + ReasonLeft}) {
		t.Errorf("events of a on the first replica: %v", got)
	}
}

// The tombstone runs from the time the Lease gives, not from when a
// replica noticed.
func TestEngineTombstoneFromLeaseTimes(t *testing.T) {
	t.Run("departed, noticed late", func(t *testing.T) {
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
		h.clk.Step(2 * time.Minute)
		departure := t0.Add(30 * time.Second)
		if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, departure, docA()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		v := h.pub.waitFor(t, "a left at its departure", func(v compute.Output) bool { return leftAt(v, idA).Equal(departure) })
		// Routing tells a shutdown from a lapse by the reason.
		if c := readyCond(peerOf(v, idA)); c.Reason != v1alpha1.PeerReasonShutDown || !c.LastTransitionTime.Time.Equal(departure) {
			t.Errorf("a's Ready condition after its shutdown: %+v", c)
		}

		end := departure.Add(h.opts.TombstonePeriod)
		h.clk.SetTime(end.Add(-time.Second))
		v = h.pub.waitFor(t, "b re-read just before a's tombstone ends", func(v compute.Output) bool {
			return peerOf(v, idB).Status.LastSyncTime.Time.Equal(h.clk.Now())
		})
		if peerOf(v, idA) == nil || routeOf(v, "things.v1.only-a.example.com") == nil {
			t.Fatal("the tombstone ended early")
		}
		h.clk.Step(time.Second)
		h.eng.poke() // a second is no refresh tick
		v = h.pub.waitFor(t, "a removed", func(v compute.Output) bool { return peerOf(v, idA) == nil })
		if routeOf(v, "things.v1.only-a.example.com") != nil {
			t.Error("a's route outlives its tombstone")
		}
		want := []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Warning " + ReasonLeft, "Normal " + ReasonRemoved}
		if got := h.eventsFor(idA); !slices.Equal(got, want) {
			t.Errorf("events: %v, want %v", got, want)
		}
	})

	t.Run("lapsed before the replica started", func(t *testing.T) {
		renewed := t0.Add(-2 * time.Minute)
		lapsed := peerlease.NewRegistrationLease(nil, idA, epA, "v1.37.2", "", renewed) // 10s, never renewed
		h := newHarness(t, testOptions(), seed{kube: []runtime.Object{lapsed, regLease(idB, epB, "v1.36.3", t0)}})
		h.scraper.set(epA, serve(docA()))
		h.scraper.set(epB, serve(docB()))
		h.start()
		gone := renewed.Add(peerlease.DefaultDurationSeconds * time.Second)
		v := h.pub.waitFor(t, "b ready, a tombstoned", func(v compute.Output) bool { return isReady(v, idB) && peerOf(v, idA) != nil })
		p := peerOf(v, idA)
		if !leftAt(v, idA).Equal(gone) || readyCond(p).Status != metav1.ConditionFalse || readyCond(p).Reason != v1alpha1.PeerReasonLeft ||
			!readyCond(p).LastTransitionTime.Time.Equal(gone) || p.Spec.Endpoint != epA {
			t.Errorf("a: %+v %+v", p.Spec, p.Status)
		}
		if calls := h.scraper.callsTo(epA); len(calls) != 0 {
			t.Errorf("a lapsed peer was read %d times", len(calls))
		}
		h.clk.SetTime(gone.Add(h.opts.TombstonePeriod - time.Second))
		v = h.pub.waitFor(t, "b re-read just before a's tombstone ends", func(v compute.Output) bool {
			return peerOf(v, idB).Status.LastSyncTime.Time.Equal(h.clk.Now())
		})
		if peerOf(v, idA) == nil {
			t.Fatal("the tombstone ended early")
		}
		h.clk.Step(time.Second)
		h.eng.poke() // a second is no refresh tick
		h.pub.waitFor(t, "a removed", func(v compute.Output) bool { return peerOf(v, idA) == nil })
		// Its leaving was before this replica; the tombstone's end is news.
		if got := h.eventsFor(idA); !slices.Equal(got, []string{"Normal " + ReasonRemoved}) {
			t.Errorf("events for a peer that left before the replica started: %v", got)
		}
	})
}

// The EndpointSlice may list a departing server after its Lease says it
// left: that address is the server that left (no address peer with a
// tombstone of its own) until its tombstone ends.
func TestEngineDepartedLeaseClaimsItsAddress(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), kubernetesSlice("kubernetes", 6443, "10.0.0.1")}})
	h.scraper.set(epA, serve(docA()))
	h.start()
	v := h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	if p := peerOf(v, idA); !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceRegistrationLease}) {
		t.Fatalf("a's sources: %v", sources(p))
	}
	departure := t0.Add(time.Second)
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), departed(t, idA, epA, t0, departure, docA()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v = h.pub.waitFor(t, "a left", func(v compute.Output) bool { return leftAt(v, idA).Equal(departure) })
	calls := len(h.scraper.callsTo(epA))
	n := h.pub.count()
	h.tick() // a refresh would show (and read) an address peer
	v = h.pub.waitFor(t, "a refresh", func(v compute.Output) bool { return h.pub.count() > n })
	if len(v.Peers) != 1 || peerOf(v, epA) != nil {
		t.Errorf("the departed server's address became a peer:\n%s", describe(v))
	}
	if p := peerOf(v, idA); !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("a's sources after it left: %v", sources(p))
	}
	if n := len(h.scraper.callsTo(epA)); n != calls {
		t.Errorf("the address was read %d times after a left", n-calls)
	}

	// After the tombstone the address is a peer of its own again.
	h.clk.SetTime(departure.Add(h.opts.TombstonePeriod))
	h.pub.waitFor(t, "the address peer", func(v compute.Output) bool { return peerOf(v, idA) == nil && peerOf(v, epA) != nil })
}

// Back under the same ID after a recorded departure: until its first read
// the resources its Lease listed stay routed to it as not ready (503), never
// missing (404).
func TestEngineRejoinAfterDepartureKeepsRoutes(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{departed(t, idA, epA, t0.Add(-time.Minute), t0.Add(-30*time.Second), docA())}})
	release, started := make(chan struct{}), make(chan struct{})
	h.scraper.set(epA, gated(release, started, docA()))
	h.start()
	h.pub.waitFor(t, "a tombstoned", func(v compute.Output) bool { return leftAt(v, idA).Equal(t0.Add(-30 * time.Second)) })

	// Its filter renews the Lease, which drops the departure.
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), regLease(idA, epA, "v1.37.2", t0), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, "a read again", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	v := h.pub.waitFor(t, "a back, not read yet", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && p.Status.LeftTime == nil
	})
	rt := routeOf(v, "things.v1.only-a.example.com")
	if rt == nil || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].Left || isReady(v, idA) {
		t.Fatalf("a's route while it is read: %+v", rt)
	}
	close(release)
	v = h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	if p := peerOf(v, idA); p.Status.DiscoveryETag != docA().APIsETag {
		t.Errorf("a's document after the read: %+v", p.Status)
	}
	if calls := h.scraper.callsTo(epA); len(calls) != 1 || calls[0].apiETag != "" || calls[0].apisETag != "" {
		t.Errorf("reads of a: %+v (want one, without ETags)", calls)
	}
}
