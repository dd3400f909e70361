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

package routing

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

var (
	deployments = gvr("apps", "v1", "deployments")
	namespaces  = gvr("", "v1", "namespaces")
	sleepy      = gvr("example.com", "v1", "sleepy")
)

// reviewTable: pods and namespaces are served by a, b and c (not ready);
// deployments by a and b; widgets by a, c and d (left); departed by e and
// f, both left; sleepy by p1..p6, none ready.
func reviewTable() *Table {
	return newTable(
		rt(pods, servedByAll, withPeers(ready("a"), ready("b"), notReady("c"))),
		rt(namespaces, servedByAll, withPeers(ready("a"), ready("b"), notReady("c"))),
		rt(deployments, withPeers(ready("a"), ready("b"))),
		rt(widgets, withPeers(ready("a"), notReady("c"), left("d"))),
		rt(crds, clusterWide("CustomResourceDefinition"), withPeers(ready("a"))),
		rt(onlyLeft, withPeers(left("e"), left("f"))),
		rt(sleepy, withPeers(notReady("p1"), notReady("p2"), notReady("p3"), notReady("p4"), notReady("p5"), notReady("p6"))),
	)
}

var lastSync = metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))

// reviewPeer is the APIServerPeer of a source that registered itself (it
// runs the filter), its discovery read at lastSync.
func reviewPeer(id string) *v1alpha1.APIServerPeer {
	if id == "" {
		return nil
	}
	p := peerObject(id, endpointOf(id), metav1.ConditionTrue, id == "d")
	p.Spec.Sources = []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}
	p.Status.LastSyncTime = &lastSync
	return p
}

func review(t *testing.T, table *Table, spec v1alpha1.RouteReviewSpec) v1alpha1.RouteReviewStatus {
	t.Helper()
	st, err := reviewView(table, spec, reviewPeer(spec.SourcePeer), time.Now())
	if err != nil {
		t.Fatalf("%+v: %v", spec, err)
	}
	return st
}

// The review parses paths with kube-apiserver's own request info resolver.
func TestRequestInfoFactoryIsKubeAPIServers(t *testing.T) {
	upstream := genericapiserver.NewRequestInfoResolver(&genericapiserver.Config{
		LegacyAPIGroupPrefixes: sets.NewString(genericapiserver.DefaultLegacyAPIPrefix),
	})
	if !reflect.DeepEqual(RequestInfoFactory, upstream) {
		t.Fatalf("RequestInfoFactory %+v, kube-apiserver's %+v", RequestInfoFactory, upstream)
	}
}

func TestReviewPaths(t *testing.T) {
	table := reviewTable()
	cases := []struct {
		path     string
		resource bool
		gvr      [3]string
	}{
		{"/api/v1/pods", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/namespaces/ns1/pods", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/namespaces/ns1/pods/p1", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/namespaces/ns1/pods/p1/log?container=c", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/namespaces/ns1/pods/p1/exec?command=ls&stdout=true", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/watch/namespaces/ns1/pods", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/pods?watch=true&resourceVersion=5", true, [3]string{"", "v1", "pods"}},
		{"/api/v1/namespaces/ns1", true, [3]string{"", "v1", "namespaces"}},
		{"/api/v1/namespaces/ns1/status", true, [3]string{"", "v1", "namespaces"}},
		{"/apis/apps/v1/deployments", true, [3]string{"apps", "v1", "deployments"}},
		{"/apis/apps/v1/namespaces/ns1/deployments", true, [3]string{"apps", "v1", "deployments"}},
		{"/apis/apps/v1/namespaces/ns1/deployments/d1", true, [3]string{"apps", "v1", "deployments"}},
		{"/apis/apps/v1/namespaces/ns1/deployments/d1/scale", true, [3]string{"apps", "v1", "deployments"}},
		{"/apis/example.com/v1/widgets/w1/status", true, [3]string{"example.com", "v1", "widgets"}},
		{"/healthz", false, [3]string{}},
		{"/version", false, [3]string{}},
		{"/api", false, [3]string{}},
		{"/api/v1", false, [3]string{"", "v1", ""}},
		{"/apis", false, [3]string{}},
		{"/apis/apps", false, [3]string{}},
		{"/apis/apps/v1", false, [3]string{"apps", "v1", ""}},
		{"/openapi/v3/apis/apps/v1", false, [3]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			st := review(t, table, v1alpha1.RouteReviewSpec{Verb: "get", Path: tc.path, SourcePeer: "a"})
			got := [3]string{st.Group, st.Version, st.Resource}
			if got != tc.gvr {
				t.Fatalf("GVR = %v, want %v", got, tc.gvr)
			}
			if st.Reason == "" {
				t.Fatal("empty reason")
			}
			if !tc.resource && tc.gvr != ([3]string{}) {
				// A group-version's resource list: DecideGroupVersion.
				if !strings.Contains(st.Reason, "the resource list of") {
					t.Fatalf("resource list: %+v", st)
				}
			} else if tc.path == "/api" || tc.path == "/apis" {
				// A root document: DecideRoot; the view is synced.
				if st.Decision != v1alpha1.RouteLocal || st.Reason != MergedDocumentReason {
					t.Fatalf("root document: %+v", st)
				}
			} else if strings.HasPrefix(tc.path, "/apis/") && !strings.Contains(tc.path[len("/apis/"):], "/") {
				// A group's document: DecideGroup.
				if st.Decision != v1alpha1.RouteNotFound || !strings.Contains(st.Reason, "the discovery document apps") {
					t.Fatalf("group document: %+v", st)
				}
			} else if !tc.resource {
				if st.Decision != v1alpha1.RouteLocal || !strings.Contains(st.Reason, "not a resource request") || st.Candidates != nil {
					t.Fatalf("non-resource: %+v", st)
				}
			}
		})
	}
}

func TestReviewVerbs(t *testing.T) {
	table := reviewTable()
	// The decision does not depend on the verb (the filter routes every
	// method alike); the Kubernetes verbs and the HTTP methods are accepted.
	for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
		"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
		st := review(t, table, v1alpha1.RouteReviewSpec{Verb: verb, Path: "/apis/apps/v1/namespaces/ns1/deployments", SourcePeer: "c"})
		if st.Decision != v1alpha1.RouteProxy || st.Resource != "deployments" {
			t.Fatalf("%s: %+v", verb, st)
		}
	}
	if got := len(ReviewVerbs()); got != 14 {
		t.Fatalf("ReviewVerbs: %d verbs, want 14: %v", got, ReviewVerbs())
	}
	// Other spellings and other words are not verbs.
	for _, verb := range []string{"", "Get", "head", "OPTIONS", "proxy", "connect", "escalate", strings.Repeat("x", 1<<20)} {
		if _, err := reviewView(table, v1alpha1.RouteReviewSpec{Verb: verb, Path: "/api/v1/pods"}, nil, time.Now()); err == nil || len(err.Error()) > 100 {
			t.Errorf("verb %.20q: error %.200v, want a short one", verb, err)
		}
	}
	// The special verb in the path is parsed, whatever the verb field says.
	st := review(t, table, v1alpha1.RouteReviewSpec{Verb: "watch", Path: "/apis/apps/v1/watch/deployments", SourcePeer: "c"})
	if st.Resource != "deployments" || st.Decision != v1alpha1.RouteProxy {
		t.Fatalf("watch path: %+v", st)
	}
}

// TestReviewMatchesDecide: the review is the filter's decision, Decide,
// on what the filter would have: the GVR kube-apiserver's resolver parses
// (TestRequestInfoFactoryIsKubeAPIServers), the source's own APIs and the
// loop-prevention header. They are written out here as data: what each
// server of reviewTable serves, and each path's GVR.
func TestReviewMatchesDecide(t *testing.T) {
	table := reviewTable()
	serves := map[string]localSet{
		"a": {pods: true, namespaces: true, deployments: true, widgets: true, crds: true},
		"b": {pods: true, namespaces: true, deployments: true},
		"c": {pods: true, namespaces: true, widgets: true},
		"d": {}, // left
		"z": {},
		"":  {pods: true, namespaces: true}, // no source: what every peer serves
	}
	paths := map[string]schema.GroupVersionResource{
		"/api/v1/pods":                           pods,
		"/api/v1/namespaces/ns1":                 namespaces,
		"/apis/apps/v1/namespaces/x/deployments": deployments,
		"/apis/example.com/v1/widgets/w1":        widgets,
		"/apis/example.com/v1/departed":          onlyLeft,
		"/apis/example.com/v1/sleepy":            sleepy,
		"/apis/crd.example.com/v1/things":        crds,
		"/apis/x/v1/y":                           gvr("x", "v1", "y"),
	}
	decisions := map[v1alpha1.RouteDecision]int{}
	for path, g := range paths {
		for src, local := range serves {
			for _, proxied := range []bool{false, true} {
				st := review(t, table, v1alpha1.RouteReviewSpec{Verb: "list", Path: path, SourcePeer: src, PeerProxied: proxied})
				res := decide(table, Request{IsResourceRequest: true, GVR: g, AlreadyProxied: proxied}, src, local)
				decisions[res.Decision]++
				if res.Decision != st.Decision || res.Reason() != st.Reason {
					t.Fatalf("%s from %q (proxied %v): review %s %q, decide %s %q", path, src, proxied, st.Decision, st.Reason, res.Decision, res.Reason())
				}
				if res.Decision == v1alpha1.RouteProxy {
					if got := reviewIDs(st.Candidates); !reflect.DeepEqual(got, ids(res.Candidates)) || st.Target != res.Candidates[0].ID {
						t.Fatalf("%s from %q: review tries %v (target %s), decide %v", path, src, got, st.Target, ids(res.Candidates))
					}
				}
			}
		}
	}
	if len(decisions) != 4 {
		t.Fatalf("decisions covered: %v, want all four", decisions)
	}
}

func TestReviewInvalidPath(t *testing.T) {
	huge := "/" + strings.Repeat("a", 1<<20)
	for _, path := range []string{"", "apis/apps/v1/deployments", "%zz", "/api/v1/watch", "/apis/apps/v1/proxy",
		huge + "%zz", huge + "\x7f", "/apis/apps/v1/watch?" + huge} {
		_, err := reviewView(reviewTable(), v1alpha1.RouteReviewSpec{Verb: "get", Path: path}, nil, time.Now())
		if err == nil {
			t.Errorf("path %.40q: no error", path)
			continue
		}
		// The error never repeats the path: the registry echoes a
		// bounded prefix once.
		if msg := err.Error(); len(msg) > 100 {
			t.Errorf("path %.40q: error of %d bytes: %.200s", path, len(msg), msg)
		}
	}
}
