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

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/nopeer"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// recorded is a registration lease as the filter of a running server
// writes it: renewed at renewed, lasting the default 10 s, with what doc
// lists recorded.
func recorded(t *testing.T, id, endpoint string, renewed time.Time, doc Document) *coordinationv1.Lease {
	t.Helper()
	enc, err := peerlease.EncodeServed(peerlease.ServedFromDiscovery(doc.API, doc.APIs))
	if err != nil {
		t.Fatal(err)
	}
	return peerlease.NewRegistrationLease(nil, id, endpoint, doc.Version, enc, renewed)
}

// A server that crashed (its Lease lapsed, no departure recorded) while
// every replica was down: a replica started afterwards routes its APIs as
// unavailable for the whole tombstone, from what its Lease recorded while
// it ran, exactly as a replica that had read it.
// Its record in a Lease of its own (the filter's since #48), or in its
// registration Lease (an older filter's); with both, the served-record
// Lease's.
func TestEngineCrashedPeerTombstoneOnAReplicaStartedLater(t *testing.T) {
	renewed := t0.Add(-time.Minute)
	enc := func(doc Document) string {
		e, err := peerlease.EncodeServed(peerlease.ServedFromDiscovery(doc.API, doc.APIs))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, tc := range []struct {
		name   string
		leases []runtime.Object
	}{
		{"served-record Lease", []runtime.Object{peerlease.NewRegistrationLease(nil, idA, epA, "v1.37.2", "", renewed), peerlease.NewServedLease(nil, idA, peerlease.ServedContent{Served: enc(docA())})}},
		{"in the registration Lease", []runtime.Object{recorded(t, idA, epA, renewed, docA())}},
		{"both: the served-record Lease wins", []runtime.Object{recorded(t, idA, epA, renewed, docB()), peerlease.NewServedLease(nil, idA, peerlease.ServedContent{Served: enc(docA())})}},
	} {
		t.Run(tc.name, func(t *testing.T) { crashedPeerTombstone(t, renewed, tc.leases) })
	}
}

func crashedPeerTombstone(t *testing.T, renewed time.Time, leasesOfA []runtime.Object) {
	gone := renewed.Add(peerlease.DefaultDurationSeconds * time.Second)
	h := newHarness(t, testOptions(), seed{kube: append(leasesOfA, regLease(idB, epB, "v1.36.3", t0))})
	h.scraper.set(epB, serve(docB()))
	h.start()
	v := h.pub.waitFor(t, "b ready, a tombstoned", func(v compute.Output) bool { return isReady(v, idB) && peerOf(v, idA) != nil })
	if !leftAt(v, idA).Equal(gone) {
		t.Errorf("a left at %s, want %s", leftAt(v, idA), gone)
	}
	for _, name := range []string{"things.v1.only-a.example.com", "globals.v1.cluster-only.example.com"} {
		rt := routeOf(v, name)
		if rt == nil || len(rt.Status.Peers) != 1 || !rt.Status.Peers[0].Left || rt.Status.Peers[0].ServerID != idA {
			t.Errorf("%s: %+v, want a's tombstone", name, rt)
		}
	}
	if calls := h.scraper.callsTo(epA); len(calls) != 0 {
		t.Errorf("a crashed peer was read %d times", len(calls))
	}
	// Until the tombstone ends, then gone.
	h.clk.SetTime(gone.Add(h.opts.TombstonePeriod))
	v = h.pub.waitFor(t, "a removed after its tombstone", func(v compute.Output) bool { return peerOf(v, idA) == nil })
	if routeOf(v, "things.v1.only-a.example.com") != nil {
		t.Error("a's route outlives its tombstone")
	}
}

// A live server this replica has not read (it cannot reach it, or the
// first read is under way) is routed from what its Lease records: listed,
// not ready (503), never missing (a false 404). Its first read replaces
// the list with its document.
func TestEngineUnreadLivePeerRoutedFromItsLease(t *testing.T) {
	live := recorded(t, idA, epA, t0, docA())
	live.Spec.LeaseDurationSeconds = ptr.To[int32](86400)
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{live, regLease(idB, epB, "v1.36.3", t0)}})
	h.scraper.set(epA, fail(nopeer.ErrRefused))
	h.scraper.set(epB, serve(docB()))
	h.start()
	v := h.pub.waitFor(t, "b ready, a tried", func(v compute.Output) bool {
		return isReady(v, idB) && peerOf(v, idA) != nil && readyCond(peerOf(v, idA)).Reason == string(nopeer.ErrRefused)
	})
	rt := routeOf(v, "things.v1.only-a.example.com")
	if rt == nil || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].ServerID != idA || rt.Status.Peers[0].Left {
		t.Fatalf("things: %+v, want a listed, live", rt)
	}
	if isReady(v, idA) {
		t.Error("a peer never read is ready")
	}
	// Read at last: its own document, with verbs.
	h.scraper.set(epA, serve(docA()))
	h.refresh(epA)
	v = h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	if !hasGroupVersion(v, "only-a.example.com", "v1") || routeOf(v, "things.v1.only-a.example.com") == nil {
		t.Error("a's document lost its routes")
	}
}

// A server's own discovery changes (a server that just started registers
// its new groups' APIServices after its first renewal): its filter records
// the new list in its Lease, and every replica reads the server again at
// once, not at the next refresh. A renewal with the same list reads
// nothing.
func TestEngineRereadsAPeerWhoseLeaseRecordChanged(t *testing.T) {
	opts := testOptions()
	opts.RefreshInterval = time.Hour
	early := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	lease := func(doc Document, renewed time.Time) *coordinationv1.Lease {
		l := recorded(t, idA, epA, renewed, doc)
		l.Spec.LeaseDurationSeconds = ptr.To[int32](86400)
		return l
	}
	h := newHarness(t, opts, seed{kube: []runtime.Object{lease(early, t0)}})
	h.scraper.set(epA, serve(early))
	h.start()
	h.pub.waitFor(t, "a ready without its new group", func(v compute.Output) bool { return isReady(v, idA) })
	leases := h.kube.CoordinationV1().Leases(peerlease.Namespace)
	reads := len(h.scraper.callsTo(epA))

	// A renewal that records the same list.
	if _, err := leases.Update(ctx(), lease(early, t0.Add(3*time.Second)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The complete list, as the server serves it now.
	h.scraper.set(epA, serve(docA()))
	if _, err := leases.Update(ctx(), lease(docA(), t0.Add(6*time.Second)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v := h.pub.waitFor(t, "a's new group routed", func(v compute.Output) bool {
		rt := routeOf(v, "things.v1.only-a.example.com")
		return rt != nil && isReady(v, idA) && hasGroupVersion(v, "only-a.example.com", "v1")
	})
	if rt := routeOf(v, "things.v1.only-a.example.com"); len(rt.Status.Peers) != 1 || rt.Status.Peers[0].ServerID != idA {
		t.Errorf("things: %+v, want a", rt.Status)
	}
	if got := len(h.scraper.callsTo(epA)) - reads; got != 1 {
		t.Errorf("a read %d times after two renewals, one with a new list; want once", got)
	}
}

// lapsingPeers runs an engine with a, whose Lease (renewed at t0, 10 s)
// lapses unless renewed, and b, whose Lease lasts a day; both read and
// ready. Refreshes are a minute apart, so only a lapse wakes the engine.
func lapsingPeers(t *testing.T) *harness {
	t.Helper()
	opts := testOptions()
	opts.RefreshInterval = time.Minute
	h := newHarness(t, opts, seed{kube: []runtime.Object{recorded(t, idA, epA, t0, docA()), regLease(idB, epB, "v1.36.3", t0)}})
	h.scraper.set(epA, serve(docA()))
	h.scraper.set(epB, serve(docB()))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
	return h
}

// A server that stops renewing its Lease is gone when the Lease lapses,
// not at the next refresh tick.
func TestEngineSeesALapseWhenItHappens(t *testing.T) {
	h := lapsingPeers(t)
	// Renewed once, 4 s in; then never again (frozen).
	h.clk.Step(4 * time.Second)
	turn := h.eng.turns.Load()
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), recorded(t, idA, epA, h.clk.Now(), docA()), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expires := h.clk.Now().Add(peerlease.DefaultDurationSeconds * time.Second)
	h.handled("the engine saw the renewal", turn)
	// Other Leases renew meanwhile (the watch works), the last 1 s before
	// a's expiry (14 s).
	h.setTimeWithLeaseTraffic(expires.Add(-time.Second))
	// Past the expiry, before the next refresh tick (60 s): only the
	// lapse timer wakes the engine.
	h.clk.SetTime(expires.Add(time.Second))
	v := h.waitForTimer("a gone at its lapse", func(v compute.Output) bool { return leftAt(v, idA).Equal(expires) })
	if rt := routeOf(v, "things.v1.only-a.example.com"); rt == nil || !rt.Status.Peers[0].Left {
		t.Errorf("things: %+v, want a's tombstone", rt)
	}
}

// A Lease watch that delivers nothing (stuck on a kube-apiserver that
// stopped answering) does not make Leases seem to lapse: a server whose
// renewals this replica cannot see is not marked gone, which would end
// the requests in flight to it; it is at most one Lease duration late
// when every server is really gone.
func TestEngineStuckLeaseWatchDefersLapses(t *testing.T) {
	h := lapsingPeers(t)
	expires := t0.Add(peerlease.DefaultDurationSeconds * time.Second)
	// Nothing heard since t0; a's Lease expired a second ago.
	h.clk.SetTime(expires.Add(time.Second))
	turn := h.eng.turns.Load()
	h.eng.poke()
	h.handled("a reconcile", turn)
	v := h.pub.since(h.pub.count() - 1)[0]
	if leftAt(v, idA) != (time.Time{}) {
		t.Fatalf("a marked gone at %s while the Lease watch was silent", leftAt(v, idA))
	}
	// One Lease duration later, gone anyway, at the time its Lease says.
	h.clk.SetTime(expires.Add(maxLapseDelay + time.Second))
	h.waitForTimer("a gone one Lease duration late", func(v compute.Output) bool { return leftAt(v, idA).Equal(expires) })
}
