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

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestRouteReviewMatchesRequests: for every routed GVR and every running
// server, RouteReview's decision is what a real request through that server
// gets (its own answer, a peer's, 404 or 503, the 503's Retry-After
// included): on the ready plane, with one GVR served by one server only,
// and after that server shut down; and the drain what-if computed before
// the shutdown (the plugin's) predicts what the requests then get.
func TestRouteReviewMatchesRequests(t *testing.T) {
	ids := readyPlane(t)
	running := []int{old, new1, new2}
	matchEverywhere(t, "the ready plane", ids, running)

	// new2 alone serves rejoinGVR.
	const victim = new2
	name := cluster.Servers()[victim].Name
	servingAlone(t, victim)
	planetest.WaitFor(t, 2*time.Minute, rejoinPath+" routed to "+name, func() error {
		for _, i := range []int{old, new1} {
			if r := review(t, new1, "list", rejoinPath, ids[i]); r.Decision != v1alpha1.RouteProxy || r.Target != ids[victim] {
				return fmt.Errorf("review from %s: %s %s", cluster.Servers()[i].Name, r.Decision, r.Reason)
			}
		}
		return nil
	})
	matchEverywhere(t, name+" alone serves "+rejoinGVR.String(), ids, running)

	// What draining new2 would do, as the plugin computes it, then the
	// drain itself.
	tables, err := pd(t, new1).PeerdiscoveryV1alpha1().PeerRoutingTables().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	peers, err := pd(t, new1).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	servers := []string{ids[old], ids[new1], ids[victim]}
	what := routing.WhatIfDrained(&routing.Snapshot{Table: routing.NewTableFromObjects(tables.Items, peers.Items)}, time.Now(), servers, ids[victim])
	if !slices.ContainsFunc(what.Unavailable, func(r routing.DrainedRoute) bool { return r.GVR == rejoinGVR }) {
		t.Fatalf("the drain what-if of %s does not name %s unavailable: %+v", name, rejoinGVR, what)
	}
	if err := cluster.StopAPIServer(victim, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, time.Minute, "the review to see "+name+" gone", func() error {
		if r := review(t, new1, "list", rejoinPath, ids[old]); r.Decision != v1alpha1.RouteUnavailable {
			return fmt.Errorf("%s %s", r.Decision, r.Reason)
		}
		return nil
	})
	running = []int{old, new1}
	matchEverywhere(t, name+" shut down", ids, running)
	// Started again, so that servingAlone's clean-up finds it running.
	defer func() {
		if err := cluster.StartAPIServer(victim); err != nil {
			t.Error(err)
		}
	}()
	for _, drained := range [][]routing.DrainedRoute{what.Unavailable, what.FailOver} {
		for _, r := range drained {
			for from, to := range r.From {
				i := slices.IndexFunc(running, func(i int) bool { return ids[i] == from })
				if i < 0 {
					continue
				}
				got := review(t, new1, "list", listPath(r.GVR), from)
				if (to == "" && got.Decision != v1alpha1.RouteUnavailable) || (to != "" && got.Target != to) {
					t.Errorf("%s from %s: the what-if said %q (\"\": 503), now %s to %q (%s)", r.GVR, from, to, got.Decision, got.Target, got.Reason)
				}
			}
		}
	}
}

// listPath is the cluster-wide list of gvr.
func listPath(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

// scopedListPath is the list of gvr in namespace default when it is
// namespaced (some namespaced kinds, bindings say, have no cluster-wide
// path), else the cluster-wide list.
func scopedListPath(gvr schema.GroupVersionResource, scope apidiscoveryv2.ResourceScope) string {
	if scope != apidiscoveryv2.ScopeNamespace {
		return listPath(gvr)
	}
	if gvr.Group == "" {
		return "/api/" + gvr.Version + "/namespaces/default/" + gvr.Resource
	}
	return "/apis/" + gvr.Group + "/" + gvr.Version + "/namespaces/default/" + gvr.Resource
}

// matchEverywhere lists every routing table the filter routes by (not
// cluster-wide) and, for every one and every running server, compares
// RouteReview's decision for a list through that server with a real list.
func matchEverywhere(t *testing.T, stage string, ids map[int]string, running []int) {
	t.Helper()
	tables, err := pd(t, new1).PeerdiscoveryV1alpha1().PeerRoutingTables().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checked := map[v1alpha1.RouteDecision]int{}
	// (group-version lists count as "list <decision>")
	for _, rt := range tables.Items {
		if rt.Status.ClusterWide {
			continue
		}
		path := scopedListPath(schema.GroupVersionResource{Group: rt.Spec.Group, Version: rt.Spec.Version, Resource: rt.Spec.Resource}, rt.Spec.Scope)
		for _, i := range running {
			r := review(t, new1, "list", path, ids[i])
			code, h, body := planetest.Get(t, cluster.AdminConfig(i), path+"?limit=1")
			if err := sameOutcome(r, code, h, body); err != nil {
				t.Errorf("%s: list %s through %s: %v (review: %s: %s)", stage, path, cluster.Servers()[i].Name, err, r.Decision, r.Reason)
			}
			checked[r.Decision]++
		}
	}
	// Each group-version's resource list (DecideGroupVersion).
	gvs := map[string]bool{}
	for _, rt := range tables.Items {
		if rt.Status.ClusterWide {
			continue
		}
		path := "/apis/" + rt.Spec.Group + "/" + rt.Spec.Version
		if rt.Spec.Group == "" {
			path = "/api/" + rt.Spec.Version
		}
		if gvs[path] {
			continue
		}
		gvs[path] = true
		for _, i := range running {
			r := review(t, new1, "get", path, ids[i])
			code, h, body := planetest.Get(t, cluster.AdminConfig(i), path)
			if err := sameListOutcome(r, code, h, body); err != nil {
				t.Errorf("%s: get %s through %s: %v (review: %s: %s)", stage, path, cluster.Servers()[i].Name, err, r.Decision, r.Reason)
			}
			checked["list "+r.Decision]++
		}
	}
	t.Logf("%s: %d routing tables, decisions checked: %v", stage, len(tables.Items), checked)
	if checked[v1alpha1.RouteProxy] == 0 {
		t.Errorf("%s: no proxied request was checked", stage)
	}
}

// sameOutcome tells whether a real answer is what the review's decision
// makes it: Local and Proxy are answered by a server that serves the
// resource (not 404, not the filter's 503), NotFound is the chain's 404,
// Unavailable the filter's 503 with the Retry-After its reason says.
func sameOutcome(r v1alpha1.RouteReviewStatus, code int, h http.Header, body []byte) error {
	switch r.Decision {
	case v1alpha1.RouteLocal, v1alpha1.RouteProxy:
		if code == http.StatusNotFound || code == http.StatusServiceUnavailable {
			return fmt.Errorf("answered %d: %.200s", code, body)
		}
	case v1alpha1.RouteNotFound:
		if code != http.StatusNotFound {
			return fmt.Errorf("answered %d, want 404: %.200s", code, body)
		}
	case v1alpha1.RouteUnavailable:
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("answered %d, want 503: %.200s", code, body)
		}
		if err := planetest.Check503(h, body); err != nil {
			return err
		}
		soon := strings.Contains(r.Reason, routing.RecoveringNote) || strings.Contains(r.Reason, "not synced yet") || strings.Contains(r.Reason, "does not list it yet")
		if soon != (h.Get("Retry-After") != "") {
			return fmt.Errorf("Retry-After %q, the review's reason %q", h.Get("Retry-After"), r.Reason)
		}
	}
	return nil
}

// sameListOutcome is sameOutcome for a group-version's resource list:
// Local and Proxy are a 200 (this server's or a peer's list), NotFound is
// the chain's answer (never the filter's 503), Unavailable the filter's
// 503.
func sameListOutcome(r v1alpha1.RouteReviewStatus, code int, h http.Header, body []byte) error {
	switch r.Decision {
	case v1alpha1.RouteLocal, v1alpha1.RouteProxy:
		if code != http.StatusOK {
			return fmt.Errorf("answered %d, want 200: %.200s", code, body)
		}
		return nil
	case v1alpha1.RouteNotFound:
		if code == http.StatusServiceUnavailable {
			return fmt.Errorf("answered 503, want the chain's answer: %.200s", body)
		}
		return nil
	}
	return sameOutcome(r, code, h, body)
}
