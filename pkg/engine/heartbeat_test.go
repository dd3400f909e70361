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
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/nopeer"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// servedLease is the served-record Lease of a server whose filter records
// what doc lists.
func servedLease(t *testing.T, id string, doc Document) runtime.Object {
	t.Helper()
	enc, err := peerlease.EncodeServed(peerlease.ServedFromDiscovery(doc.API, doc.APIs))
	if err != nil {
		t.Fatal(err)
	}
	return peerlease.NewServedLease(nil, id, peerlease.ServedContent{Served: enc})
}

// tickAndWait fires one refresh and waits until the engine handled the
// reads it started: a refresh that finds a read in flight starts no
// heartbeat.
func (h *harness) tickAndWait(reads int) {
	h.t.Helper()
	before := h.eng.applied.Load()
	h.tick()
	poll.Eventually(h.t, fmt.Sprintf("%d reads handled", reads), func() bool { return h.eng.applied.Load() >= before+uint64(reads) })
}

// startRecordedPeer starts an engine with one peer, a, whose Lease records
// what it serves, and waits until a is ready.
func startRecordedPeer(t *testing.T) (*harness, Document) {
	t.Helper()
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), servedLease(t, idA, docA)}})
	h.scraper.set(epA, serve(docA))
	h.start()
	h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	return h, docA
}

// Between full reads, a refresh asks a peer whose Lease records what it
// serves only for its /version: its record, a CRD or an APIService change
// would say if its discovery changed. It is still read in full once per
// --resync-interval. A peer with no record (an upstream kube-apiserver)
// says nothing, so every refresh reads it in full.
func TestEngineHeartbeatsARecordedPeerBetweenFullReads(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")))
	docB := document("v1.36.3", grp("apps", ver("v1", "deployments")))
	opts := testOptions()
	opts.ResyncInterval = 5 * opts.RefreshInterval
	h := newHarness(t, opts, seed{kube: []runtime.Object{
		regLease(idA, epA, "v1.37.2", t0), servedLease(t, idA, docA),
		regLease(idB, epB, "v1.36.3", t0),
	}})
	h.scraper.set(epA, serve(docA))
	h.scraper.set(epB, serve(docB))
	h.start()
	v := h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
	synced := peerOf(v, idA).Status.LastSyncTime.Time

	fullA := len(h.scraper.callsTo(epA))
	for i := 1; i < 5; i++ {
		h.tickAndWait(2)
		if got := len(h.scraper.callsTo(epA)); got != fullA {
			t.Fatalf("refresh %d read a in full (%d reads, want %d): its record says nothing changed", i, got, fullA)
		}
		if got := h.scraper.beatsTo(epB); got != 0 {
			t.Fatalf("refresh %d: %d heartbeats of b, which records nothing: want full reads", i, got)
		}
	}
	if got := h.scraper.beatsTo(epA); got != 4 {
		t.Errorf("a: %d heartbeats in 4 refreshes, want 4", got)
	}
	v = h.pub.waitFor(t, "a view", func(compute.Output) bool { return true })
	if !isReady(v, idA) {
		t.Fatal("a not ready after its heartbeats")
	}
	if got := peerOf(v, idA).Status.LastSyncTime.Time; !got.Equal(synced) {
		t.Errorf("a heartbeat moved a's lastSyncTime from %s to %s: it read no discovery", synced, got)
	}

	// The fifth refresh is --resync-interval after the first read.
	h.tick()
	h.waitCalls(epA, fullA+1)
}

// A heartbeat that fails makes the peer not ready, as a failed read does;
// once it answers again, the not-ready recheck reads it in full and it is
// ready.
func TestEngineFailedHeartbeatMakesThePeerNotReady(t *testing.T) {
	h, docA := startRecordedPeer(t)
	before := len(h.scraper.readsTo(epA))

	h.scraper.set(epA, fail(nopeer.ErrTimeout))
	h.tickAndWait(1)
	v := h.pub.waitFor(t, "a not ready", func(v compute.Output) bool { return !isReady(v, idA) })
	if got := readyCond(peerOf(v, idA)).Reason; got != string(nopeer.ErrTimeout) {
		t.Errorf("reason %q, want %q", got, nopeer.ErrTimeout)
	}
	// The clock step that fires the refresh fires the not-ready recheck
	// too, so a full read may follow the failed heartbeat; it cannot come
	// first, the heartbeat being in flight.
	if reads := h.scraper.readsTo(epA)[before:]; len(reads) == 0 || reads[0] != "beat" {
		t.Fatalf("the refresh's reads of a: %q, want a heartbeat first", reads)
	}

	// A recheck's read may be in flight, failing, so step until one that
	// started after a answers again makes it ready.
	full := len(h.scraper.callsTo(epA))
	h.scraper.set(epA, serve(docA))
	poll.Eventually(t, "a ready again", func() bool {
		h.clk.Step(NotReadyRecheck)
		n := h.pub.count()
		return n > 0 && isReady(h.pub.since(n - 1)[0], idA)
	})
	if got := len(h.scraper.callsTo(epA)); got <= full {
		t.Errorf("a ready again after %d full reads, want more than %d: only a full read makes a peer ready", got, full)
	}
}

// A heartbeat that finds another version reads the peer in full at once: a
// new binary under the same record (a patch release) may describe its
// resources otherwise.
func TestEngineHeartbeatWithANewVersionReadsInFull(t *testing.T) {
	h, _ := startRecordedPeer(t)
	full := len(h.scraper.callsTo(epA))

	patched := document("v1.37.3", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")))
	h.scraper.set(epA, serve(patched))
	h.tickAndWait(2)
	h.waitCalls(epA, full+1)
	h.pub.waitFor(t, "a at v1.37.3", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && p.Spec.BinaryVersion == "v1.37.3"
	})
	if got := h.scraper.beatsTo(epA); got != 1 {
		t.Errorf("%d heartbeats, want 1", got)
	}
}

// A server's /apis shows a new CRD seconds after the CRD's event. The read
// the event starts finds the old document; the next refreshes read the
// peer in full again (not a heartbeat), so the CRD's group-version is in
// the view within a refresh, not a --resync-interval. From
// discoveryChurnRefreshes refresh intervals after the event, heartbeats
// again.
func TestEngineReadsInFullForRefreshesAfterADiscoveryEvent(t *testing.T) {
	h, _ := startRecordedPeer(t)
	h.tickAndWait(1)
	if got := h.scraper.beatsTo(epA); got != 1 {
		t.Fatalf("%d heartbeats before the CRD, want 1", got)
	}
	full := len(h.scraper.callsTo(epA))

	if _, err := h.ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx(),
		crd("late.example.com", "gadgets", map[string]bool{"v1": true}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The event's read: the server does not list it yet.
	h.waitCalls(epA, full+1)
	withCRD := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")), grp("late.example.com", ver("v1", "gadgets")))
	h.scraper.set(epA, serve(withCRD))
	h.tickAndWait(1)
	h.waitCalls(epA, full+2)
	h.pub.waitFor(t, "the CRD's route", func(v compute.Output) bool { return routeOf(v, "gadgets.v1.late.example.com") != nil })

	// The event came at a refresh: the refreshes within
	// discoveryChurnRefreshes intervals of it read in full.
	for i := 2; i < discoveryChurnRefreshes; i++ {
		h.tickAndWait(1)
		h.waitCalls(epA, full+1+i)
	}
	beats := h.scraper.beatsTo(epA)
	h.tickAndWait(1)
	if got := h.scraper.beatsTo(epA); got != beats+1 {
		t.Fatalf("refresh %d after the CRD: %d heartbeats, want %d", discoveryChurnRefreshes, got, beats+1)
	}
	if got := len(h.scraper.callsTo(epA)); got != full+discoveryChurnRefreshes {
		t.Errorf("%d full reads, want %d", got, full+discoveryChurnRefreshes)
	}
}
