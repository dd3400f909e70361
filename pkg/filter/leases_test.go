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

package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// fakeLeaseServer serves registration Leases to an informer: the list (or
// a watch-list's initial events), then the events sent on events.
type fakeLeaseServer struct {
	mu       sync.Mutex
	items    []string
	selector string
	events   chan string
}

func (s *fakeLeaseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	items, sel := s.items, r.URL.Query().Get("labelSelector")
	s.selector = sel
	s.mu.Unlock()
	if r.URL.Query().Get("watch") != "true" {
		serveListOrWatchList(w, r, "coordination.k8s.io/v1", "Lease", items...)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeInitialEvents(w, r, "coordination.k8s.io/v1", "Lease", items...)
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-s.events:
			fmt.Fprintln(w, ev)
			w.(http.Flusher).Flush()
		}
	}
}

// registrationLease is a server's registration Lease as JSON: renewed at
// renewed, recording served (nil: no record), departed at departed (zero:
// running).
func registrationLease(t *testing.T, id string, renewed, departed time.Time, rv string, served ...schema.GroupVersionResource) string {
	t.Helper()
	return registrationLeaseAt(t, id, "10.0.0.9:6443", renewed, departed, rv, served...)
}

// registrationLeaseAt is registrationLease for a server at endpoint.
func registrationLeaseAt(t *testing.T, id, endpoint string, renewed, departed time.Time, rv string, served ...schema.GroupVersionResource) string {
	t.Helper()
	var rs []peerlease.ServedResource
	for _, g := range served {
		rs = append(rs, peerlease.ServedResource{GroupVersionResource: g, Scope: "Namespaced", Kind: "Thing", Verbs: []string{"get", "list"}})
	}
	enc := ""
	if rs != nil {
		var err error
		if enc, err = peerlease.EncodeServed(rs); err != nil {
			t.Fatal(err)
		}
	}
	l := peerlease.NewRegistrationLease(nil, id, endpoint, "v1.37.2", enc, renewed)
	if !departed.IsZero() {
		l = peerlease.MarkDeparted(l, departed, enc)
	}
	l.ResourceVersion = rv
	l.TypeMeta.Kind, l.TypeMeta.APIVersion = "Lease", "coordination.k8s.io/v1"
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLeaseRecordedResourceIsNever404 checks the filter's own reading of
// the registration Leases: a resource that no route here names, but a
// live peer's Lease records, is proxied to that peer (its discovery
// documents, built from the view, are a 503 with Retry-After), never the
// local chain's 404, whatever peerdiscovery's view says or whether it
// synced.
// The replica a filter reads can lag behind the Leases (test/nodeplane in
// CI: a v1.37.2 server's new resources were 404 through a v1.36.3 server
// for 27 s after it was ready).
func TestLeaseRecordedResourceIsNever404(t *testing.T) {
	e := newEnv(t)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	e.f.setClock(clk)
	peerB := e.newPeer(nil)
	e.setRoutes(route(widgetsGVR, readyPeer(selfID, "self:1"), readyPeer("b", peerB.endpoint())))
	e.f.views.Routes.SetMerged(&v1alpha1.PeerAggregatedDiscovery{})

	gvr := func(g, r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: g, Version: "v1", Resource: r}
	}
	gadgets, mine, gone, lapsed, gizmos := gvr("new.example.com", "gadgets"), gvr("own.example.com", "mine"),
		gvr("gone.example.com", "gone"), gvr("lapsed.example.com", "lapsed"), gvr("new.example.com", "gizmos")
	// An aggregated API: every server serves it, and no route the filter
	// keeps names it (cluster-wide tables are left out).
	aggregated := gvr("metrics.example.com", "nodes")
	e.setLocal(podsGVR, aggregated)
	broken := `{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"peerdiscovery-x","namespace":"kube-system","resourceVersion":"5",` +
		`"labels":{"peerdiscovery.k8s.io/registration":"kube-apiserver"},"annotations":{"peerdiscovery.k8s.io/endpoint":"10.0.0.8:6443","peerdiscovery.k8s.io/served-resources":"not base64"}},` +
		`"spec":{"holderIdentity":"x","leaseDurationSeconds":10,"renewTime":"2026-12-02T12:00:00.000000Z"}}`
	srv := &fakeLeaseServer{events: make(chan string), items: []string{
		registrationLeaseAt(t, "b", peerB.endpoint(), now, time.Time{}, "1", gadgets, aggregated),
		registrationLease(t, selfID, now, time.Time{}, "2", mine),
		registrationLease(t, "d", now.Add(-time.Second), now.Add(-time.Second), "3", gone),
		registrationLease(t, "l", now.Add(-time.Minute), time.Time{}, "4", lapsed),
		broken,
	}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := e.f.views.Leases.Start(ctx, &rest.Config{Host: ts.URL}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Leases read", func() bool {
		r := e.f.views.Leases.Records()["b"]
		return r != nil && r.Served.Serves(gadgets)
	})
	if _, ok := e.f.views.Leases.Records()["x"]; ok {
		t.Error("a broken Lease was recorded")
	}
	srv.mu.Lock()
	selector := srv.selector
	srv.mu.Unlock()
	if want := peerlease.ComponentSelector; selector != want {
		t.Errorf("lease informer's label selector %q, want %q", srv.selector, want)
	}

	// want: local (the chain), proxied (to b, the resource a live Lease
	// records), or unrouted (a 503: a discovery document of what a live
	// Lease records, which only the view can build).
	const (
		local = iota
		proxied
		unrouted
	)
	unroutedLabels := map[string]string{"type": "unrouted", "group": "other", "version": "other", "resource": "other"}
	check := func(name, path string, header http.Header, want int) {
		t.Helper()
		before, localBefore, peerBefore := counterValue(t, "apiserver_peer_proxy_errors_total", unroutedLabels), e.local.calls.Load(), len(peerB.requests())
		req := e.newRequest(http.MethodGet, path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp := e.do(req)
		body := readBody(t, resp)
		localCalls, peerCalls := e.local.calls.Load()-localBefore, len(peerB.requests())-peerBefore
		switch want {
		case local:
			if localCalls != 1 || peerCalls != 0 || resp.Header.Get("X-Served-By") != "local" {
				t.Errorf("%s: %s: want the local chain, got %d %q (peer calls %d)", name, path, resp.StatusCode, body, peerCalls)
			}
		case proxied:
			if localCalls != 0 || peerCalls != 1 || resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %s: want it proxied to b, got %d %q (local calls %d, peer calls %d)", name, path, resp.StatusCode, body, localCalls, peerCalls)
				return
			}
			a := e.annotations(resp.Header.Get("Audit-Id"))
			if a[AuditRouteSource] != "registration-lease" || a[AuditProxiedTo] != "b" {
				t.Errorf("%s: audit annotations %v, want route-source registration-lease, proxied-to b", name, a)
			}
		case unrouted:
			if localCalls != 0 || peerCalls != 0 {
				t.Errorf("%s: %s: want a 503 from the filter, got %d %q (local calls %d, peer calls %d)", name, path, resp.StatusCode, body, localCalls, peerCalls)
				return
			}
			checkUnavailable(t, resp, body, "served by kube-apiserver b (its registration lease records it)", 1)
			if d := counterValue(t, "apiserver_peer_proxy_errors_total", unroutedLabels) - before; d != 1 {
				t.Errorf("%s: apiserver_peer_proxy_errors_total{type=unrouted} grew by %v, want 1", name, d)
			}
			if got := e.annotations(resp.Header.Get("Audit-Id"))[AuditDecision]; got != "unrouted" {
				t.Errorf("%s: audit decision %q, want unrouted", name, got)
			}
		}
	}
	check("a live peer records it, no route", "/apis/new.example.com/v1/namespaces/ns1/gadgets/g1", nil, proxied)
	check("its group-version's resource list", "/apis/new.example.com/v1", nil, unrouted)
	check("its group", "/apis/new.example.com", nil, unrouted)
	check("already proxied by a peer", "/apis/new.example.com/v1/namespaces/ns1/gadgets", http.Header{PeerProxiedHeader: {"true"}}, local)
	check("only this server's own Lease records it", "/apis/own.example.com/v1/mine", nil, local)
	check("only a departed server's Lease", "/apis/gone.example.com/v1/gone", nil, local)
	check("only a lapsed server's Lease", "/apis/lapsed.example.com/v1/lapsed", nil, local)
	check("recorded nowhere", "/apis/nowhere.example.com/v1/ghosts", nil, local)
	check("routed: the route decides", "/api/v1/namespaces/ns1/pods/p1", nil, local)
	check("served here too (an aggregated API)", "/apis/metrics.example.com/v1/nodes", nil, local)
	check("its group-version served here too", "/apis/metrics.example.com/v1", nil, local)
	check("its group served here too", "/apis/metrics.example.com", nil, local)

	// Unsynced (peerdiscovery unreachable) and past the sync grace: what a
	// live peer records is still never a 404; what this server serves
	// stays local.
	e.f.views.Routes.SetSynced(false)
	check("unsynced, grace over", "/apis/new.example.com/v1/namespaces/ns1/gadgets", nil, proxied)
	// Within the sync grace (a server that just started): proxied by the
	// Lease record rather than 503 "not synced yet".
	e.f.setSyncDeadline(timePtr(now.Add(time.Hour)))
	check("unsynced, in the grace", "/apis/new.example.com/v1/namespaces/ns1/gadgets", nil, proxied)
	e.f.setSyncDeadline(nil)
	check("unsynced, served here", "/api/v1/namespaces/ns1/pods/p1", nil, local)
	// The discovery documents too, once the server is past its start (its
	// post-start hook ran longer ago than the sync grace): a conformance
	// run in CI read /apis/storagemigration.k8s.io/v1 through a v1.36.3
	// server whose filter had not synced, and got the chain's 404.
	e.f.started.Store(true)
	e.f.setSyncDeadline(timePtr(now.Add(-time.Second)))
	check("unsynced, past the start: its group-version's resource list", "/apis/new.example.com/v1", nil, unrouted)
	check("unsynced, past the start: its group", "/apis/new.example.com", nil, unrouted)
	check("unsynced, past the start: a group-version served here too", "/apis/metrics.example.com/v1", nil, local)
	check("unsynced, past the start: recorded nowhere", "/apis/nowhere.example.com/v1", nil, local)
	// And the root document, which lacks the group: the namespace
	// controller finalized a namespace with a peer's kinds left in it after
	// reading one (chaos seed 2718).
	check("unsynced, past the start, no peerdiscovery APIService: /apis", "/apis", nil, local)
	e.f.views.Local.SetViewRegistered(true)
	check("unsynced, past the start: /apis lacks what b records", "/apis", nil, unrouted)
	check("unsynced, past the start: /apis, aggregated", "/apis", http.Header{"Accept": {"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}}, unrouted)
	check("unsynced, past the start: /api (b records no core resource missing here)", "/api", nil, local)
	check("unsynced, past the start: /apis for peerdiscovery's scrape", "/apis", http.Header{"Accept": {"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer"}}, local)
	e.f.started.Store(false)
	e.f.setSyncDeadline(nil)
	e.f.views.Routes.SetSynced(true)

	// A renewal with a new list, then the Lease deleted.
	srv.events <- `{"type":"MODIFIED","object":` + registrationLeaseAt(t, "b", peerB.endpoint(), now, time.Time{}, "6", gizmos) + `}`
	eventually(t, "the renewal's new list", func() bool {
		r := e.f.views.Leases.Records()["b"]
		return r != nil && r.Served.Serves(gizmos)
	})
	check("recorded by the renewal", "/apis/new.example.com/v1/gizmos", nil, proxied)
	check("no longer recorded", "/apis/new.example.com/v1/namespaces/ns1/gadgets", nil, local)
	// The Lease lapses when its renewals stop.
	clk.SetTime(now.Add((peerlease.DefaultDurationSeconds + 1) * time.Second))
	check("lapsed since", "/apis/new.example.com/v1/gizmos", nil, local)
	clk.SetTime(now)
	srv.events <- `{"type":"DELETED","object":` + registrationLease(t, "b", now, time.Time{}, "7", gizmos) + `}`
	eventually(t, "the deletion", func() bool {
		return e.f.views.Leases.Records()["b"] == nil
	})
	check("its Lease deleted", "/apis/new.example.com/v1/gizmos", nil, local)
	e.f.views.Routes.SetSynced(false)
	e.f.started.Store(true)
	e.f.setSyncDeadline(timePtr(now.Add(-time.Second)))
	check("unsynced, past the start, no live record: /apis", "/apis", nil, local)
}
