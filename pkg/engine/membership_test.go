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
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

const (
	idA, epA = "kube-apiserver-a", "10.0.0.1:6443"
	idB, epB = "kube-apiserver-b", "10.0.0.2:6443"
)

func ctx() context.Context { return context.Background() }

func sources(p *v1alpha1.APIServerPeer) []v1alpha1.PeerSource { return p.Spec.Sources }

func TestEnginePublishesWithoutPeers(t *testing.T) {
	h := newHarness(t, testOptions(), seed{})
	h.start()
	// No peer, no event, no tick: the first view still comes (readiness
	// depends on it).
	v := h.pub.waitFor(t, "a first view", func(compute.Output) bool { return true })
	if len(v.Peers) != 0 || len(v.Routes) != 0 || v.Discovery == nil || len(v.Discovery.Status.APIs.Items) != 0 {
		t.Fatalf("view from nothing:\n%s", describe(v))
	}
	// Every refresh publishes, even unchanged: that heartbeat keeps the
	// server ready.
	n := h.pub.count()
	h.tick()
	h.pub.waitFor(t, "a heartbeat view", func(compute.Output) bool { return h.pub.count() > n })
}

func TestEngineRegistrationLeaseJoin(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.1", t0)}})
	h.scraper.set(epA, serve(docA))
	h.start()

	v := h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	p := peerOf(v, idA)
	if p.Name != idA || p.Spec.Endpoint != epA || p.Spec.BinaryVersion != "v1.37.2" ||
		!slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("peer spec: %+v", p.Spec)
	}
	if c := readyCond(p); c.Reason != "DiscoverySynced" || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready condition: %+v", c)
	}
	if p.Status.LastSyncTime == nil || !p.Status.LastSyncTime.Time.Equal(t0) || p.Status.DiscoveryETag != docA.APIsETag ||
		p.Status.ResourceCount != 3 || p.Status.GroupCount != 2 || p.Status.Stale || p.Status.LastError != "" {
		t.Errorf("peer status: %+v", p.Status)
	}
	for _, name := range []string{"pods.v1.core", "configmaps.v1.core", "deployments.v1.apps"} {
		rt := routeOf(v, name)
		if rt == nil {
			t.Fatalf("no route %s:\n%s", name, describe(v))
		}
		want := []v1alpha1.RoutingPeer{{ServerID: idA, Endpoint: epA}}
		if !slices.Equal(rt.Status.Peers, want) || !rt.Status.ServedByAll || rt.Status.ClusterWide {
			t.Errorf("%s: %+v", name, rt.Status)
		}
	}
	if !hasGroupVersion(v, "apps", "v1") || !hasGroupVersion(v, "", "v1") {
		t.Error("merged discovery lacks a's groups")
	}
	calls := h.scraper.callsTo(epA)
	if c := calls[0]; c.apiETag != "" || c.apisETag != "" || !c.hasDeadline || time.Until(c.deadline) > h.opts.ScrapeTimeout {
		t.Errorf("first scrape: %+v (want no ETags and a deadline within the scrape timeout)", c)
	}
	if got := h.eventsFor(idA); !slices.Equal(got, []string{"Normal " + ReasonJoined, "Normal " + ReasonReady}) {
		t.Errorf("events: %v", got)
	}

	// A second peer joins through a lease created while the engine runs.
	docB := document("v1.36.3", grp("apps", ver("v1", "deployments")), grp("batch", ver("v1", "jobs")))
	h.scraper.set(epB, serve(docB))
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Create(ctx(), regLease(idB, epB, "v1.36.3", t0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v = h.pub.waitFor(t, "b ready", func(v compute.Output) bool { return isReady(v, idB) })
	if rt := routeOf(v, "deployments.v1.apps"); rt == nil || len(rt.Status.Peers) != 2 || rt.Status.Peers[0].ServerID != idA ||
		rt.Status.Peers[1].ServerID != idB || !rt.Status.ServedByAll || !isReady(v, idA) {
		t.Errorf("deployments after b joined: %+v", rt)
	}
	if rt := routeOf(v, "jobs.v1.batch"); rt == nil || len(rt.Status.Peers) != 1 || rt.Status.ServedByAll || rt.Status.TotalPeers != 2 {
		t.Errorf("jobs: %+v", rt)
	}

	// A refresh sends the previous ETags; the unchanged documents (304)
	// stay, and the sync time moves on.
	h.refresh(epA)
	v = h.pub.waitFor(t, "a re-synced", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && p.Status.LastSyncTime != nil && p.Status.LastSyncTime.Time.Equal(h.clk.Now())
	})
	calls = h.scraper.callsTo(epA)
	if c := calls[len(calls)-1]; c.apiETag != docA.APIETag || c.apisETag != docA.APIsETag {
		t.Errorf("refresh sent ETags %q %q, want %q %q", c.apiETag, c.apisETag, docA.APIETag, docA.APIsETag)
	}
	if p := peerOf(v, idA); readyCond(p).Status != metav1.ConditionTrue || p.Status.ResourceCount != 3 || p.Status.DiscoveryETag != docA.APIsETag {
		t.Errorf("a after a 304: %+v", p.Status)
	}
	if routeOf(v, "deployments.v1.apps") == nil {
		t.Error("a 304 lost the routes")
	}
}

func TestEngineIdentityLeases(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{
		identityLease("apiserver-abc", "10.0.0.3:6443", t0),
		identityLease("apiserver-gate-off", "", t0), // no annotation: ignored
		regLease(idA, epA, "v1.37.2", t0),
		identityLease(idA, "10.9.9.9:6443", t0), // the registration lease's endpoint wins
	}})
	h.scraper.set("10.0.0.3:6443", serve(document("v1.37.2")))
	h.scraper.set(epA, serve(document("v1.37.2")))
	h.start()

	v := h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, "apiserver-abc") && isReady(v, idA) })
	if len(v.Peers) != 2 {
		t.Fatalf("peers:\n%s", describe(v))
	}
	if p := peerOf(v, "apiserver-abc"); p.Spec.Endpoint != "10.0.0.3:6443" ||
		!slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceIdentityLease}) {
		t.Errorf("identity peer: %+v", p.Spec)
	}
	if p := peerOf(v, idA); p.Spec.Endpoint != epA ||
		!slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceIdentityLease, v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("peer with both leases: %+v", p.Spec)
	}
	if eps := h.scraper.endpoints(); slices.Contains(eps, "10.9.9.9:6443") || len(eps) != 2 {
		t.Errorf("scraped %v", eps)
	}

	// Identity leases last an hour, but one not renewed for
	// IdentityLeaseStaleAfter means its server is gone.
	h.setTimeWithLeaseTraffic(h.clk.Now().Add(h.opts.IdentityLeaseStaleAfter + time.Second))
	v = h.pub.waitFor(t, "the identity-only peer gone", func(v compute.Output) bool {
		p := peerOf(v, "apiserver-abc")
		return p != nil && p.Status.LeftTime != nil
	})
	if p := peerOf(v, idA); p.Status.LeftTime != nil || !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("a after its identity lease went stale: %+v %+v", p.Spec, p.Status)
	}
}

func TestEngineEndpointSlice(t *testing.T) {
	slice := kubernetesSlice("kubernetes", 6443, "10.0.0.1", "10.0.0.2", "10.0.0.3")
	slice.Endpoints[2].Conditions.Ready = ptr.To(false)
	other := kubernetesSlice("kubernetes-other-port", 6443, "10.0.0.4")
	other.Ports[0].Name = ptr.To("metrics") // not the https port: ignored
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), slice, other}})
	h.scraper.set(epA, serve(document("v1.37.2")))
	h.scraper.set(epB, serve(document("v1.36.3", grp("batch", ver("v1", "jobs")))))
	h.start()

	v := h.pub.waitFor(t, "a and the address peer ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, epB) })
	if len(v.Peers) != 2 {
		t.Fatalf("peers:\n%s", describe(v))
	}
	if p := peerOf(v, idA); !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("a's sources: %v", sources(p))
	}
	p := peerOf(v, epB)
	if p.Name != "10.0.0.2-6443" || p.Spec.Endpoint != epB || p.Spec.BinaryVersion != "v1.36.3" ||
		!slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice}) {
		t.Errorf("address peer: %s %+v", p.Name, p.Spec)
	}
	if rt := routeOf(v, "jobs.v1.batch"); rt == nil || rt.Status.Peers[0].ServerID != epB {
		t.Errorf("jobs route: %+v", rt)
	}
	if eps := h.scraper.endpoints(); slices.Contains(eps, "10.0.0.3:6443") || slices.Contains(eps, "10.0.0.4:6443") {
		t.Errorf("scraped a not-ready or non-https endpoint: %v", eps)
	}

	// b's lease appears at the address: the address peer becomes b, with
	// no tombstone left behind under the address.
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Create(ctx(), regLease(idB, epB, "v1.36.3", t0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v = h.pub.waitFor(t, "b ready under its ID", func(v compute.Output) bool { return isReady(v, idB) })
	if peerOf(v, epB) != nil || len(v.Peers) != 2 {
		t.Errorf("the address peer stays beside b:\n%s", describe(v))
	}
	if p := peerOf(v, idB); !slices.Equal(sources(p), []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceRegistrationLease}) {
		t.Errorf("b's sources: %v", sources(p))
	}
	events := h.drainEvents()
	for _, e := range events {
		if strings.Contains(e, ReasonLeft) {
			t.Errorf("event %q: the address peer did not leave", e)
		}
	}
	// Recognised by its marker (known only from the EndpointSlice), not
	// by its ID being its address.
	if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, ReasonRemoved) }) {
		t.Errorf("no %s event for the address peer now known as b: %v", ReasonRemoved, events)
	}
}

func TestEngineLeaseDeletedTombstone(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0), regLease(idB, epB, "", t0)}})
	h.scraper.set(epA, serve(docA))
	h.scraper.set(epB, serve(document("v1.37.2", grp("apps", ver("v1", "deployments")))))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })

	if err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Delete(ctx(), peerlease.LeaseName(idA), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	left := h.clk.Now()
	v := h.pub.waitFor(t, "a left", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && p.Status.LeftTime != nil
	})
	p := peerOf(v, idA)
	if c := readyCond(p); c.Status != metav1.ConditionFalse || c.Reason != "Left" || !p.Status.LeftTime.Time.Equal(left) {
		t.Errorf("a left: %+v %+v", c, p.Status)
	}
	rt := routeOf(v, "things.v1.only-a.example.com")
	if rt == nil || len(rt.Status.Peers) != 1 || !rt.Status.Peers[0].Left || rt.Status.TotalPeers != 1 {
		t.Fatalf("the tombstoned route: %+v", rt)
	}
	if !hasGroupVersion(v, "only-a.example.com", "v1") {
		t.Error("a left and its APIs left the merged discovery before its tombstone expired")
	}
	if rt := routeOf(v, "deployments.v1.apps"); rt == nil || !rt.Status.ServedByAll || !isReady(v, idB) {
		t.Errorf("deployments: %+v", rt)
	}

	// Before the tombstone expires, refreshes keep it.
	h.clk.Step(h.opts.TombstonePeriod - time.Minute)
	h.waitCalls(epB, len(h.scraper.callsTo(epB))+1)
	v = h.pub.waitFor(t, "b re-synced", func(v compute.Output) bool {
		p := peerOf(v, idB)
		return p != nil && p.Status.LastSyncTime.Time.Equal(h.clk.Now())
	})
	if rt := routeOf(v, "things.v1.only-a.example.com"); rt == nil || peerOf(v, idA) == nil {
		t.Fatal("the tombstone expired early")
	}
	if calls := h.scraper.callsTo(epA); len(calls) != 1 {
		t.Errorf("a peer that left is still scraped: %d calls", len(calls))
	}

	h.clk.Step(time.Minute)
	v = h.pub.waitFor(t, "a removed", func(v compute.Output) bool { return peerOf(v, idA) == nil })
	if routeOf(v, "things.v1.only-a.example.com") != nil {
		t.Error("the route only a served outlives its tombstone")
	}
	if rt := routeOf(v, "deployments.v1.apps"); rt == nil || len(rt.Status.Peers) != 1 {
		t.Errorf("deployments: %+v", rt)
	}
	want := []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Warning " + ReasonLeft, "Normal " + ReasonRemoved}
	if got := h.eventsFor(idA); !slices.Equal(got, want) {
		t.Errorf("events: %v, want %v", got, want)
	}
}

func TestEngineLeaseLapses(t *testing.T) {
	short := peerlease.NewRegistrationLease(nil, idA, epA, "", "", t0) // 10s, never renewed
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{short, regLease(idB, epB, "", t0)}})
	h.scraper.set(epA, serve(document("v1.37.2")))
	h.scraper.set(epB, serve(document("v1.37.2")))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
	h.setTimeWithLeaseTraffic(h.clk.Now().Add(peerlease.DefaultDurationSeconds*time.Second + time.Second))
	v := h.pub.waitFor(t, "a lapsed", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && p.Status.LeftTime != nil
	})
	if !isReady(v, idB) {
		t.Error("b lapsed too")
	}
}

func TestEngineRejoin(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0)}})
	h.scraper.set(epA, serve(document("v1.37.2", grp("apps", ver("v1", "deployments")))))
	h.start()
	h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	leases := h.kube.CoordinationV1().Leases(peerlease.Namespace)
	if err := leases.Delete(ctx(), peerlease.LeaseName(idA), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.pub.waitFor(t, "a left", func(v compute.Output) bool { return peerOf(v, idA).Status.LeftTime != nil })
	calls := len(h.scraper.callsTo(epA))

	// Back (a restart): read at once, not at the next refresh.
	if _, err := leases.Create(ctx(), regLease(idA, epA, "", t0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v := h.pub.waitFor(t, "a ready again", func(v compute.Output) bool { return isReady(v, idA) })
	if p := peerOf(v, idA); p.Status.LeftTime != nil {
		t.Errorf("a rejoined: %+v", p.Status)
	}
	if rt := routeOf(v, "deployments.v1.apps"); rt == nil || rt.Status.Peers[0].Left {
		t.Errorf("route after rejoin: %+v", rt)
	}
	if n := len(h.scraper.callsTo(epA)); n != calls+1 {
		t.Errorf("%d scrapes after the rejoin, want 1", n-calls)
	}
	want := []string{"Normal " + ReasonJoined, "Normal " + ReasonReady, "Warning " + ReasonLeft, "Normal " + ReasonJoined, "Normal " + ReasonReady}
	if got := h.eventsFor(idA); !slices.Equal(got, want) {
		t.Errorf("events: %v, want %v", got, want)
	}
}

func TestEngineEndpointMoves(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0)}})
	h.scraper.set(epA, serve(document("v1.36.3")))
	h.scraper.set("10.0.0.11:6443", serve(document("v1.37.2", grp("apps", ver("v1", "deployments")))))
	h.start()
	h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	l := peerlease.NewRegistrationLease(nil, idA, "10.0.0.11:6443", "v1.37.2", "", t0)
	l.Spec.LeaseDurationSeconds = ptr.To[int32](86400)
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v := h.pub.waitFor(t, "a moved", func(v compute.Output) bool { return routeOf(v, "deployments.v1.apps") != nil })
	p := peerOf(v, idA)
	if p.Spec.Endpoint != "10.0.0.11:6443" || p.Spec.BinaryVersion != "v1.37.2" || readyCond(p).Status != metav1.ConditionTrue {
		t.Errorf("a after the move: %+v", p.Spec)
	}
	if rt := routeOf(v, "deployments.v1.apps"); rt.Status.Peers[0].Endpoint != "10.0.0.11:6443" {
		t.Errorf("route endpoint: %+v", rt.Status.Peers)
	}
}

func TestEngineBrokenLeaseIgnored(t *testing.T) {
	broken := regLease("kube-apiserver-x", epA, "", t0)
	broken.Annotations[peerlease.EndpointAnnotation] = "not-an-endpoint"
	noHolder := regLease("kube-apiserver-y", "10.0.0.8:6443", "", t0)
	noHolder.Spec.HolderIdentity = nil
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{broken, noHolder, regLease(idB, epB, "", t0)}})
	h.scraper.set(epB, serve(document("v1.37.2")))
	h.scraper.set("10.0.0.9:6443", serve(document("v1.37.2")))
	h.start()
	v := h.pub.waitFor(t, "b ready", func(v compute.Output) bool { return isReady(v, idB) })
	if len(v.Peers) != 1 {
		t.Fatalf("broken leases made peers:\n%s", describe(v))
	}
	if eps := h.scraper.endpoints(); !slices.Equal(eps, []string{epB}) {
		t.Errorf("scraped %v", eps)
	}
	// The engine keeps going: a refresh reads b again; fixing the lease
	// brings its server in.
	h.refresh(epB)
	fixed := regLease("kube-apiserver-x", "10.0.0.9:6443", "", t0)
	fixed.ResourceVersion = ""
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v = h.pub.waitFor(t, "x ready", func(v compute.Output) bool { return isReady(v, "kube-apiserver-x") })
	if !isReady(v, idB) || len(v.Peers) != 2 {
		t.Errorf("after the fix:\n%s", describe(v))
	}
}
