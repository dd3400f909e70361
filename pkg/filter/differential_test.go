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
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/discovery"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// TestFilterAgreesWithRouteReview is the differential test of the one
// decision: over generated states (routes, APIServerPeers in every
// readiness, registration Leases live, lapsed, departed or renewed before
// or after the view's judgment, this server's own discovery, the view
// synced or not, readable or stale) and request paths (every verb, subresources, watches,
// unknown groups, group-version resource lists, group paths), what the
// filter does with a real request (served by its chain, proxied to which
// peer, 503 with or without Retry-After) is what RouteReview says on the
// filter's own snapshot, every case.
func TestFilterAgreesWithRouteReview(t *testing.T) {
	e := newEnv(t)
	ids := []string{"a", "b", "c", "d"}
	endpoints := map[string]string{}
	for _, id := range ids {
		p := e.newPeer(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Test-Peer", id)
			w.WriteHeader(http.StatusOK)
		})
		endpoints[id] = p.endpoint()
	}
	e.local.respond.Store(nil)
	// Past its start: an unsynced filter's discovery documents are then
	// routing decisions (DecideRoot, DecideGroup, DecideGroupVersion),
	// once its sync grace is over.
	e.f.started.Store(true)
	// A synced view has a merged document; this one lists no group, so
	// every group's document is DecideGroup's.
	e.f.views.Routes.SetMerged(&v1alpha1.PeerAggregatedDiscovery{})
	e.f.views.Local.SetViewRegistered(true)
	gvrs := []schema.GroupVersionResource{
		podsGVR, widgetsGVR,
		{Group: "example.com", Version: "v1", Resource: "gadgets"},
		{Group: "other.io", Version: "v2", Resource: "things"},
		{Group: "nowhere.io", Version: "v1", Resource: "foos"}, // never routed
	}
	rng := rand.New(rand.NewPCG(20261205, 1))
	const cases = 400
	seen := map[string]int{}
	for i := range cases {
		now := time.Now()
		state := genState(rng, now, ids, endpoints, gvrs)
		e.f.views.Routes.SetTable(routing.NewTable(state.tables, state.peers))
		e.f.views.Routes.SetSynced(state.synced)
		e.f.views.Routes.SetStale(state.stale)
		e.f.setSyncDeadline(timePtr(state.graceUntil))
		e.f.views.Leases.SetRecords(state.records)
		e.setLocal(state.local...)
		verb, path := genRequest(rng, gvrs)
		if !state.synced && discovery.IsDiscoveryPath(path) && state.graceUntil.After(now) {
			// A discovery document while not synced, in the sync grace,
			// is the starting server's 503 (readiness, not routing): not
			// a review's.
			continue
		}

		status, err := routing.Review(e.f.views.Snapshot(), v1alpha1.RouteReviewSpec{Verb: verb, Path: path, SourcePeer: selfID}, nil, time.Now())
		if err != nil {
			t.Fatalf("case %d: review %s %s: %v", i, verb, path, err)
		}
		got := e.observe(verb, path)
		want := reviewedAction(status)
		seen[want]++
		if path == "/api" || path == "/apis" {
			seen["root: "+want]++
		}
		if !sameAction(got.action, want) {
			t.Fatalf("case %d: %s %s: the filter %s, RouteReview says %s (%s)\nstate: %s", i, verb, path, got.action, want, status.Reason, state)
		}
		if status.Decision == v1alpha1.RouteUnavailable && !strings.Contains(got.body, status.Reason) {
			t.Fatalf("case %d: %s %s: the 503 says %q, RouteReview %q", i, verb, path, got.body, status.Reason)
		}
	}
	t.Logf("actions over %d cases: %v", cases, seen)
	// Every kind of action was exercised.
	for _, a := range []string{"chain", "503", "503 Retry-After", "root: chain", "root: 503 Retry-After"} {
		if seen[a] == 0 {
			t.Errorf("no case ended as %q: the generator misses it", a)
		}
	}
	proxied := 0
	for a, n := range seen {
		if strings.HasPrefix(a, "proxy to ") {
			proxied += n
		}
	}
	if proxied == 0 {
		t.Error("no case was proxied")
	}
}

// genState is one generated routing state of the filter.
type diffState struct {
	tables     []*v1alpha1.PeerRoutingTable
	peers      []*v1alpha1.APIServerPeer
	records    routing.Records
	local      []schema.GroupVersionResource
	synced     bool
	stale      bool
	graceUntil time.Time
	desc       []string
}

func (s diffState) String() string { return strings.Join(s.desc, "; ") }

func genState(rng *rand.Rand, now time.Time, ids []string, endpoints map[string]string, gvrs []schema.GroupVersionResource) diffState {
	s := diffState{records: routing.Records{}, synced: rng.IntN(5) > 0, stale: rng.IntN(2) == 0}
	if rng.IntN(2) == 0 {
		s.graceUntil = now.Add(time.Minute)
	} else {
		s.graceUntil = now.Add(-time.Minute)
	}
	s.desc = append(s.desc, fmt.Sprintf("synced=%v stale=%v grace=%v", s.synced, s.stale, s.graceUntil.After(now)))
	// Times stay clear of RecoveryWindow's edge: 1 s or 30 s ago.
	ago := func() time.Duration { return []time.Duration{time.Second, 30 * time.Second}[rng.IntN(2)] }
	notReadySince := map[string]time.Time{}
	for _, id := range ids {
		var p *v1alpha1.APIServerPeer
		switch rng.IntN(5) {
		case 0: // no APIServerPeer
		case 1, 2:
			p = diffPeer(id, endpoints[id], metav1.ConditionTrue, now.Add(-time.Hour))
			s.desc = append(s.desc, id+" ready")
		case 3:
			since := now.Add(-ago())
			notReadySince[id] = since
			p = diffPeer(id, endpoints[id], metav1.ConditionFalse, since)
			s.desc = append(s.desc, fmt.Sprintf("%s not ready %v ago", id, now.Sub(since).Round(time.Second)))
		case 4:
			since := now.Add(-ago())
			notReadySince[id] = since
			p = diffPeer(id, endpoints[id], metav1.ConditionFalse, since)
			p.Status.LeftTime = &metav1.Time{Time: since}
			p.Status.Conditions[0].Reason = []string{v1alpha1.PeerReasonLeft, v1alpha1.PeerReasonShutDown}[rng.IntN(2)]
			s.desc = append(s.desc, fmt.Sprintf("%s left (%s) %v ago", id, p.Status.Conditions[0].Reason, now.Sub(since).Round(time.Second)))
		}
		if p != nil {
			s.peers = append(s.peers, p)
		}
		// Its registration Lease.
		var served []schema.GroupVersionResource
		for _, g := range gvrs {
			if rng.IntN(3) == 0 {
				served = append(served, g)
			}
		}
		renewed := now.Add(-time.Duration(rng.IntN(3)) * time.Second)
		if since, ok := notReadySince[id]; ok && rng.IntN(2) == 0 {
			renewed = since.Add(-time.Second)
		}
		r := &routing.Record{ID: id, Endpoint: endpoints[id], RenewTime: renewed, Expires: renewed.Add(10 * time.Second), Served: routing.NewServed(served)}
		switch rng.IntN(6) {
		case 0:
			continue // no Lease
		case 1:
			r.Expires = now.Add(-20 * time.Second)
		case 2:
			r.Departed, r.DepartedAt = true, renewed
		}
		s.records[id] = r
		s.desc = append(s.desc, fmt.Sprintf("%s lease renewed %v ago live=%v records %v", id, now.Sub(renewed).Round(time.Second), r.Live(now), served))
	}
	// Routes: this server is listed for what it serves (a consistent view).
	for _, g := range gvrs[:len(gvrs)-1] {
		if rng.IntN(4) == 0 {
			continue // no route
		}
		var listed []v1alpha1.RoutingPeer
		if rng.IntN(3) == 0 {
			listed = append(listed, readyPeer(selfID, "self:1"))
			s.local = append(s.local, g)
		}
		for _, id := range ids {
			if rng.IntN(2) == 0 {
				listed = append(listed, v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpoints[id]})
			}
		}
		s.tables = append(s.tables, route(g, listed...))
		s.desc = append(s.desc, fmt.Sprintf("route %s: %v", g, listed))
	}
	return s
}

func diffPeer(id, endpoint string, status metav1.ConditionStatus, since time.Time) *v1alpha1.APIServerPeer {
	return &v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec:       v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: endpoint},
		Status: v1alpha1.APIServerPeerStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: status, Reason: "Test", LastTransitionTime: metav1.NewTime(since)},
		}},
	}
}

// genRequest is a verb and path: a resource (collection, object,
// subresource, watch) of one of gvrs, a group-version's resource list or a
// group.
func genRequest(rng *rand.Rand, gvrs []schema.GroupVersionResource) (string, string) {
	g := gvrs[rng.IntN(len(gvrs))]
	prefix := "/apis/" + g.Group + "/" + g.Version
	if g.Group == "" {
		prefix = "/api/" + g.Version
	}
	switch rng.IntN(9) {
	case 0:
		return "get", prefix
	case 1:
		if g.Group == "" {
			return "get", "/api"
		}
		return "get", "/apis/" + g.Group
	case 8:
		return "get", []string{"/api", "/apis"}[rng.IntN(2)]
	case 2:
		return "watch", prefix + "/watch/namespaces/ns1/" + g.Resource
	case 3:
		return "get", prefix + "/namespaces/ns1/" + g.Resource + "/x/status"
	}
	verb := []string{"get", "list", "create", "update", "patch", "delete"}[rng.IntN(6)]
	switch verb {
	case "list", "create":
		return verb, prefix + "/namespaces/ns1/" + g.Resource
	}
	return verb, prefix + "/namespaces/ns1/" + g.Resource + "/x"
}

// diffObserved is what a request through the filter got.
type diffObserved struct {
	action string
	body   string
}

// observe sends one request through the filter and says what it did: the
// chain answered ("chain"), a peer did ("proxy to ID"), or the filter
// answered 503 ("503", "503 Retry-After").
func (e *env) observe(verb, path string) diffObserved {
	method := map[string]string{"get": http.MethodGet, "list": http.MethodGet, "watch": http.MethodGet, "create": http.MethodPost,
		"update": http.MethodPut, "patch": http.MethodPatch, "delete": http.MethodDelete}[verb]
	var body io.Reader
	if method != http.MethodGet && method != http.MethodDelete {
		body = strings.NewReader(`{}`)
	}
	req, err := http.NewRequest(method, e.front.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	resp := e.do(req)
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case resp.Header.Get("X-Test-Peer") != "":
		return diffObserved{action: "proxy to " + resp.Header.Get("X-Test-Peer")}
	case resp.Header.Get("X-Served-By") == "local":
		return diffObserved{action: "chain"}
	case resp.StatusCode == http.StatusOK && discovery.IsDiscoveryPath(path):
		return diffObserved{action: "merged"}
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		return diffObserved{action: "503 Retry-After", body: string(b)}
	case resp.StatusCode == http.StatusServiceUnavailable:
		return diffObserved{action: "503", body: string(b)}
	}
	return diffObserved{action: fmt.Sprintf("answered %d: %s", resp.StatusCode, b)}
}

// sameAction compares observe's action with reviewedAction's: where a
// review says this server answers, the filter may answer from its chain or
// from the view's merged document ("merged"), by the request's Accept
// header, which a review does not carry.
func sameAction(got, want string) bool {
	return got == want || (want == "chain" && got == "merged")
}

// reviewedAction is what RouteReview says the filter does, in observe's
// terms.
func reviewedAction(st v1alpha1.RouteReviewStatus) string {
	switch st.Decision {
	case v1alpha1.RouteProxy:
		if st.Target == "" {
			// Split: the list merged from the view's merged discovery;
			// the test gives the filter none, so its chain answers.
			return "chain"
		}
		return "proxy to " + st.Target
	case v1alpha1.RouteUnavailable:
		if strings.Contains(st.Reason, routing.RecoveringNote) || strings.Contains(st.Reason, "not synced yet") || strings.Contains(st.Reason, "does not list it yet") {
			return "503 Retry-After"
		}
		return "503"
	}
	// Local and NotFound: this server's own chain answers.
	return "chain"
}
