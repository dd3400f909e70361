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

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// taggedServedLease is the served-record Lease of a server whose filter
// records the list of listed and the ETags of tagged: a change of what
// the list leaves out (an aggregated API's resources) moves only the
// ETags.
func taggedServedLease(t *testing.T, id string, listed, tagged Document) *coordinationv1.Lease {
	t.Helper()
	enc, err := peerlease.EncodeServed(peerlease.ServedFromDiscovery(listed.API, listed.APIs))
	if err != nil {
		t.Fatal(err)
	}
	return peerlease.NewServedLease(nil, id, peerlease.ServedContent{Served: enc, ETags: peerlease.DiscoveryETags{API: tagged.APIETag, APIs: tagged.APIsETag}})
}

// A peer whose record carries its discovery's ETags is read in full only
// when they change (its filter reads its own discovery every minute) or
// once per --resync-interval (10 min), not every minute as a peer whose
// record has none; new ETags read it at once, ETags this replica already
// read do not.
func TestEngineReadsATaggedPeerWhenItsETagsChange(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	docB := document("v1.36.3", grp("apps", ver("v1", "deployments")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{
		regLease(idA, epA, "v1.37.2", t0), taggedServedLease(t, idA, docA, docA),
		regLease(idB, epB, "v1.36.3", t0), servedLease(t, idB, docB),
	}})
	h.scraper.set(epA, serve(docA))
	h.scraper.set(epB, serve(docB))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
	fullA, fullB := len(h.scraper.callsTo(epA)), len(h.scraper.callsTo(epB))

	// A minute of refreshes: b's record has no ETags, so its minute's
	// safety poll reads it; a's ETags say nothing changed.
	refreshes := int(untaggedResyncInterval / h.opts.RefreshInterval)
	for i := 0; i < refreshes; i++ {
		h.tickAndWait(2)
	}
	h.waitCalls(epB, fullB+1)
	if got := len(h.scraper.callsTo(epA)); got != fullA {
		t.Fatalf("a read in full %d times in a minute of unchanged ETags, want 0 (b, untagged: %d)", got-fullA, len(h.scraper.callsTo(epB))-fullB)
	}

	// An aggregated API's resources change under an unchanged APIService:
	// a's list stays the same, its ETags move.
	withAggregated := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("metrics.example.com", ver("v1beta1", "nodes")))
	h.scraper.set(epA, serve(withAggregated))
	leases := h.kube.CoordinationV1().Leases(peerlease.Namespace)
	if _, err := leases.Update(ctx(), taggedServedLease(t, idA, docA, withAggregated), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitCalls(epA, fullA+1)
	h.pub.waitFor(t, "a's new group in the view", func(v compute.Output) bool { return hasGroupVersion(v, "metrics.example.com", "v1beta1") })

	// ETags other than those this replica last read: a read.
	moved := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("metrics.example.com", ver("v1", "nodes")))
	h.scraper.set(epA, serve(moved))
	if _, err := leases.Update(ctx(), taggedServedLease(t, idA, docA, docA), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitCalls(epA, fullA+2)
	h.pub.waitFor(t, "a's moved group in the view", func(v compute.Output) bool { return hasGroupVersion(v, "metrics.example.com", "v1") })

	// The record catching up with what this replica already read (a CRD
	// or APIService event read the peer before its filter's own read): no
	// read. A read started by the record would take the tick's place of
	// a's heartbeat.
	turn := h.eng.turns.Load()
	if _, err := leases.Update(ctx(), taggedServedLease(t, idA, docA, moved), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.handled("the record with the ETags a was last read with", turn)
	h.tickAndWait(2)
	if got := len(h.scraper.callsTo(epA)); got != fullA+2 {
		t.Fatalf("a read in full %d times, want 2: the last record's ETags are those of the last read", got-fullA)
	}

	// The safety poll: --resync-interval after a's last read, not before.
	resync := int(h.opts.ResyncInterval / h.opts.RefreshInterval)
	for i := 2; i < resync; i++ {
		h.tickAndWait(2)
	}
	if got := len(h.scraper.callsTo(epA)); got != fullA+2 {
		t.Fatalf("a read in full %d times before --resync-interval, want 2", got-fullA)
	}
	h.tick()
	h.waitCalls(epA, fullA+3)
}

// New ETags recorded while the peer's first read is in flight read it
// again once that read ends: it may have been answered before the change,
// and the safety poll is 10 min away.
func TestEngineReadsAgainAfterETagsChangedDuringARead(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0), taggedServedLease(t, idA, docA, docA)}})
	release := make(chan struct{})
	h.scraper.set(epA, func(ctx context.Context, _, _ string) (Document, error) {
		<-release
		return docA, nil
	})
	h.start()
	h.waitCalls(epA, 1)

	withAggregated := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("metrics.example.com", ver("v1beta1", "nodes")))
	turn := h.eng.turns.Load()
	if _, err := h.kube.CoordinationV1().Leases(peerlease.Namespace).Update(ctx(), taggedServedLease(t, idA, docA, withAggregated), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.handled("the record's new ETags", turn)
	h.scraper.set(epA, serve(withAggregated))
	close(release)
	h.waitCalls(epA, 2)
	h.pub.waitFor(t, "a's new group in the view", func(v compute.Output) bool { return hasGroupVersion(v, "metrics.example.com", "v1beta1") })
}
