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
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// syncErrorCount reads upstream's apiserver_peer_discovery_sync_errors_total,
// which the engine counts its failures in.
func syncErrorCount(t *testing.T, typ nopeer.ErrorType) float64 {
	t.Helper()
	vals, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, "apiserver_peer_discovery_sync_errors_total", map[string]string{}, "type")
	if err != nil {
		if strings.Contains(err.Error(), "not found") { // no failure counted yet
			return 0
		}
		t.Fatal(err)
	}
	return vals[string(typ)]
}

func TestEngineScrapeFailureKeepsLastDocument(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")))
	docB := document("v1.37.2", grp("apps", ver("v1", "deployments")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0), regLease(idB, epB, "", t0)}})
	h.scraper.set(epA, serve(docA))
	h.scraper.set(epB, serve(docB))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })
	refusedBefore := syncErrorCount(t, nopeer.ErrRefused)

	h.scraper.set(epA, fail(nopeer.ErrRefused))
	h.refresh(epA)
	v := h.pub.waitFor(t, "a not ready", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && readyCond(p).Status == metav1.ConditionFalse
	})
	p := peerOf(v, idA)
	if c := readyCond(p); c.Reason != string(nopeer.ErrRefused) || !strings.Contains(c.Message, "scripted") || !c.LastTransitionTime.Time.Equal(h.clk.Now()) {
		t.Errorf("Ready condition: %+v", c)
	}
	if !p.Status.Stale || !strings.Contains(p.Status.LastError, "scripted ConnectionRefused") || p.Status.ResourceCount != 4 ||
		!p.Status.LastSyncTime.Time.Equal(t0) || p.Status.DiscoveryETag != docA.APIsETag {
		t.Errorf("a keeps its last good document, marked stale: %+v", p.Status)
	}
	if !hasGroupVersion(v, "only-a.example.com", "v1") {
		t.Error("a's last good document left the merged discovery")
	}
	if rt := routeOf(v, "things.v1.only-a.example.com"); rt == nil || isReady(v, idA) || rt.Status.Peers[0].Left {
		t.Errorf("route only a serves: %+v", rt)
	}
	if rt := routeOf(v, "deployments.v1.apps"); rt == nil || len(rt.Status.Peers) != 2 {
		t.Errorf("deployments: %+v", rt)
	}
	if !isReady(v, idB) {
		t.Error("b is affected by a's failure")
	}
	if after := syncErrorCount(t, nopeer.ErrRefused); after <= refusedBefore {
		t.Errorf("apiserver_peer_discovery_sync_errors_total{type=%q} not counted: %v -> %v", nopeer.ErrRefused, refusedBefore, after)
	}

	// The same failure again: no new event. Another cause: one more.
	h.refresh(epA)
	h.scraper.set(epA, fail(nopeer.ErrTLS))
	h.refresh(epA)
	h.pub.waitFor(t, "a failing with TLS", func(v compute.Output) bool { return readyCond(peerOf(v, idA)).Reason == string(nopeer.ErrTLS) })

	h.scraper.set(epA, serve(docA))
	h.refresh(epA)
	v = h.pub.waitFor(t, "a ready again", func(v compute.Output) bool { return isReady(v, idA) })
	if p := peerOf(v, idA); p.Status.Stale || p.Status.LastError != "" {
		t.Errorf("a after recovery: %+v", p.Status)
	}
	want := []string{
		"Normal " + ReasonJoined, "Normal " + ReasonReady,
		"Warning " + ReasonNotReady, "Warning " + ReasonNotReady, // refused, then TLS
		"Normal " + ReasonReady,
	}
	if got := h.eventsFor(idA); !slices.Equal(got, want) {
		t.Errorf("events of a: %v, want %v", got, want)
	}
	if got := h.eventsFor(idB); !slices.Equal(got, []string{"Normal " + ReasonJoined, "Normal " + ReasonReady}) {
		t.Errorf("events of b: %v", got)
	}
}

// A peer whose first read fails says why at once.
func TestEngineFirstScrapeFails(t *testing.T) {
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "v1.37.2", t0)}})
	h.scraper.set(epA, func(context.Context, string, string) (Document, error) {
		// Wrapped: the reason is still the classified type.
		return Document{}, fmt.Errorf("reading peer: %w", &nopeer.ReadError{Type: nopeer.ErrDecode, Path: "/apis", Err: errors.New("bad JSON")})
	})
	h.start()
	v := h.pub.waitFor(t, "a failed", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && readyCond(p).Reason == string(nopeer.ErrDecode)
	})
	p := peerOf(v, idA)
	if p.Status.Stale || p.Status.LastSyncTime != nil || p.Spec.BinaryVersion != "v1.37.2" || len(v.Routes) != 0 {
		t.Errorf("a never read: %+v %+v", p.Spec, p.Status)
	}
	if got := h.eventsFor(idA); !slices.Equal(got, []string{"Normal " + ReasonJoined, "Warning " + ReasonNotReady}) {
		t.Errorf("events: %v", got)
	}
}

func TestEngineHungPeerDoesNotBlockOthers(t *testing.T) {
	opts := testOptions()
	opts.ScrapeTimeout = 10 * time.Minute // the hang outlives the test
	h := newHarness(t, opts, seed{kube: []runtime.Object{regLease(idA, epA, "", t0), regLease(idB, epB, "", t0)}})
	h.scraper.set(epA, serve(document("v1.37.2")))
	h.scraper.set(epB, serve(document("v1.37.2")))
	h.start()
	h.pub.waitFor(t, "both ready", func(v compute.Output) bool { return isReady(v, idA) && isReady(v, idB) })

	hung := &int32Counter{}
	h.scraper.set(epA, hang(nil, hung))
	callsA := len(h.scraper.callsTo(epA))
	h.refresh(epA)
	poll.Eventually(t, "a's scrape hanging", func() bool { return hung.get() == 1 })
	for i, g := range []string{"one.example.com", "two.example.com", "three.example.com"} {
		h.scraper.set(epB, serve(document("v1.37.2", grp(g, ver("v1", "widgets")))))
		h.refresh(epB)
		v := h.pub.waitFor(t, "b's new document", func(v compute.Output) bool { return hasGroupVersion(v, g, "v1") })
		if n := hung.get(); n != 1 {
			t.Fatalf("round %d: %d hung scrapes outstanding, want 1", i, n)
		}
		if !isReady(v, idB) || !isReady(v, idA) {
			t.Errorf("round %d: a scrape in flight changes no readiness:\n%s", i, describe(v))
		}
	}
	// a's scrape is in flight: refreshes do not pile more on it.
	if n := len(h.scraper.callsTo(epA)); n != callsA+1 {
		t.Errorf("a scraped %d times while hung, want once", n-callsA)
	}
}

func TestEngineScrapeTimeout(t *testing.T) {
	opts := testOptions()
	opts.ScrapeTimeout = 200 * time.Millisecond
	h := newHarness(t, opts, seed{kube: []runtime.Object{regLease(idA, epA, "", t0), regLease(idB, epB, "", t0)}})
	var mu sync.Mutex
	var ctxErr error
	h.scraper.set(epA, func(ctx context.Context, _, _ string) (Document, error) {
		<-ctx.Done() // hangs until the engine's deadline, no longer
		mu.Lock()
		ctxErr = ctx.Err()
		mu.Unlock()
		return Document{}, &nopeer.ReadError{Type: nopeer.ErrTimeout, Path: "/api", Err: ctx.Err()}
	})
	h.scraper.set(epB, serve(document("v1.37.2")))
	h.start()
	v := h.pub.waitFor(t, "a timed out", func(v compute.Output) bool {
		p := peerOf(v, idA)
		return p != nil && readyCond(p).Reason == string(nopeer.ErrTimeout)
	})
	if !isReady(v, idB) {
		t.Error("b not ready")
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(ctxErr, context.DeadlineExceeded) {
		t.Errorf("the hung scrape ended with %v, want its deadline", ctxErr)
	}
}

// A peer that failed a read is read again every NotReadyRecheck, not only
// at the next refresh: a server back from a freeze or a restart under the
// same ID (Lease live, served list unchanged: nothing else triggers a
// read) is ready in the view a second after it answers.
func TestEngineNotReadyPeerRecheckedBeforeTheRefresh(t *testing.T) {
	docA := document("v1.37.2", grp("apps", ver("v1", "deployments")), grp("only-a.example.com", ver("v1", "things")))
	h := newHarness(t, testOptions(), seed{kube: []runtime.Object{regLease(idA, epA, "", t0)}})
	h.scraper.set(epA, serve(docA))
	h.start()
	h.pub.waitFor(t, "a ready", func(v compute.Output) bool { return isReady(v, idA) })
	h.scraper.set(epA, fail(nopeer.ErrTimeout))
	h.refresh(epA)
	h.pub.waitFor(t, "a not ready", func(v compute.Output) bool { return !isReady(v, idA) })

	h.scraper.set(epA, serve(docA))
	before := len(h.scraper.callsTo(epA))
	h.clk.Step(NotReadyRecheck) // well before the next refresh (10 s)
	h.waitCalls(epA, before+1)
	h.pub.waitFor(t, "a ready again", func(v compute.Output) bool { return isReady(v, idA) })
}
