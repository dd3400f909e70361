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

package compute

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/diff"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

var coreDoc = docs(grp("", ver("v1", res("pods"), res("configmaps"), clusterRes("nodes"))))

// threePeers: a and b are ready, c is a not-ready (stale) old server. b
// serves batch/v1 only; c lacks configmaps and serves apps/v1beta1 only.
func threePeers() []Peer {
	a := readyPeer("kube-apiserver-a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	b := readyPeer("kube-apiserver-b", coreDoc, docs(
		grp("apps", ver("v1", res("deployments"))),
		grp("batch", ver("v1", res("jobs"))),
	))
	c := readyPeer("kube-apiserver-c",
		docs(grp("", ver("v1", res("pods"), clusterRes("nodes")))),
		docs(grp("apps", ver("v1", res("deployments")), ver("v1beta1", res("deployments")))))
	c.Ready, c.Stale, c.ReadyReason, c.LastError = false, true, "Timeout", "Timeout /apis: context deadline exceeded"
	// Unsorted on purpose.
	return []Peer{b, c, a}
}

func TestComputeRoutes(t *testing.T) {
	out, err := Compute(Input{Peers: threePeers()})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		peers       []string
		servedByAll bool
		scope       apidiscoveryv2.ResourceScope
	}
	all := []string{"kube-apiserver-a", "kube-apiserver-b", "kube-apiserver-c"}
	wants := map[string]want{
		"pods.v1.core":             {all, true, apidiscoveryv2.ScopeNamespace},
		"nodes.v1.core":            {all, true, apidiscoveryv2.ScopeCluster},
		"configmaps.v1.core":       {[]string{"kube-apiserver-a", "kube-apiserver-b"}, false, apidiscoveryv2.ScopeNamespace},
		"deployments.v1.apps":      {all, true, apidiscoveryv2.ScopeNamespace},
		"deployments.v1beta1.apps": {[]string{"kube-apiserver-c"}, false, apidiscoveryv2.ScopeNamespace},
		"jobs.v1.batch":            {[]string{"kube-apiserver-b"}, false, apidiscoveryv2.ScopeNamespace},
	}
	var names []string
	for _, r := range out.Routes {
		names = append(names, r.Name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("routes not sorted by name: %v", names)
	}
	if len(out.Routes) != len(wants) {
		t.Fatalf("routes %v, want %d", names, len(wants))
	}
	for name, w := range wants {
		rt := routeByName(out, name)
		if rt == nil {
			t.Errorf("no route %s", name)
			continue
		}
		if got := routePeerIDs(rt); !slices.Equal(got, w.peers) {
			t.Errorf("%s: peers %v, want %v (sorted)", name, got, w.peers)
		}
		if rt.Status.TotalPeers != 3 || rt.Status.ServedByAll != w.servedByAll {
			t.Errorf("%s: total %d servedByAll %v, want 3 %v", name, rt.Status.TotalPeers, rt.Status.ServedByAll, w.servedByAll)
		}
		if rt.Spec.Scope != w.scope || rt.Status.ClusterWide || rt.Status.ClusterWideSource != "" {
			t.Errorf("%s: scope %q clusterWide %v %q", name, rt.Spec.Scope, rt.Status.ClusterWide, rt.Status.ClusterWideSource)
		}
		if RouteName(gvr(rt.Spec.Group, rt.Spec.Version, rt.Spec.Resource)) != name {
			t.Errorf("%s: spec %+v does not name it", name, rt.Spec)
		}
		for _, p := range rt.Status.Peers {
			if p.Endpoint != p.ServerID+".example:6443" || p.Left {
				t.Errorf("%s: peer %+v", name, p)
			}
		}
	}
}

func TestComputeClusterWide(t *testing.T) {
	crdGroup := grp("stable.example.com", ver("v1", res("crontabs")), ver("v1beta1", res("crontabs")))
	metrics := grp("metrics.k8s.io", ver("v1beta1", res("pods"), clusterRes("nodes")))
	a := readyPeer("a", coreDoc, docs(crdGroup, metrics))
	b := readyPeer("b", coreDoc, docs(crdGroup)) // b has not seen the APIService yet
	out, err := Compute(Input{
		Peers: []Peer{a, b},
		ClusterWide: map[schema.GroupVersion]string{
			{Group: "stable.example.com", Version: "v1"}:  SourceCRD,
			{Group: "metrics.k8s.io", Version: "v1beta1"}: SourceAPIService,
			{Group: "absent.example.com", Version: "v1"}:  SourceCRD, // nobody lists it: no route
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"crontabs.v1.stable.example.com":      SourceCRD,
		"crontabs.v1beta1.stable.example.com": "",
		"pods.v1beta1.metrics.k8s.io":         SourceAPIService,
		"nodes.v1beta1.metrics.k8s.io":        SourceAPIService,
		"pods.v1.core":                        "",
	} {
		rt := routeByName(out, name)
		if rt == nil {
			t.Fatalf("no route %s", name)
		}
		if rt.Status.ClusterWide != (src != "") || rt.Status.ClusterWideSource != src {
			t.Errorf("%s: clusterWide %v source %q, want %q", name, rt.Status.ClusterWide, rt.Status.ClusterWideSource, src)
		}
	}
	if rt := routeByName(out, "pods.v1beta1.metrics.k8s.io"); rt.Status.ServedByAll || !slices.Equal(routePeerIDs(rt), []string{"a"}) {
		t.Errorf("cluster-wide does not change who lists it: %+v", rt.Status)
	}
	for _, r := range out.Routes {
		if r.Spec.Group == "absent.example.com" {
			t.Errorf("a cluster-wide GV no peer lists got a route: %s", r.Name)
		}
	}
}

func TestComputeExcluded(t *testing.T) {
	crd := grp("stable.example.com", ver("v1", res("crontabs")), ver("v2", res("crontabs")))
	only := grp("gone.example.com", ver("v1", res("things")))
	a := readyPeer("a", coreDoc, docs(crd, only))
	b := readyPeer("b", coreDoc, docs(crd))
	excl := map[schema.GroupVersion]bool{
		{Group: "stable.example.com", Version: "v1"}: true,
		{Group: "gone.example.com", Version: "v1"}:   true,
		{Group: "", Version: "v1"}:                   false,
	}
	out, err := Compute(Input{
		Peers:    []Peer{a, b},
		Excluded: func(g, v string) bool { return excl[schema.GroupVersion{Group: g, Version: v}] },
		// Even a GV that is also cluster-wide stays out once excluded.
		ClusterWide: map[schema.GroupVersion]string{{Group: "stable.example.com", Version: "v1"}: SourceCRD},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Routes {
		if excl[schema.GroupVersion{Group: r.Spec.Group, Version: r.Spec.Version}] {
			t.Errorf("excluded GV routed: %s", r.Name)
		}
	}
	if routeByName(out, "crontabs.v2.stable.example.com") == nil || routeByName(out, "pods.v1.core") == nil {
		t.Error("GVs that are not excluded lost their routes")
	}
	apis := out.Discovery.Status.APIs.Items
	if hasGV(apis, "stable.example.com", "v1") || hasGV(apis, "gone.example.com", "v1") {
		t.Errorf("excluded GV in discovery: %+v", apis)
	}
	for _, g := range apis {
		if g.Name == "gone.example.com" {
			t.Error("a group with every version excluded stays in discovery")
		}
	}
	if !hasGV(apis, "stable.example.com", "v2") {
		t.Error("stable.example.com/v2 missing from discovery")
	}
	// Counts leave excluded GVs out too: a has core (3) + crontabs v2.
	if p := peerByID(out, "a"); p.Status.ResourceCount != 4 || p.Status.GroupCount != 2 {
		t.Errorf("a: %d resources in %d groups, want 4 in 2", p.Status.ResourceCount, p.Status.GroupCount)
	}
}

func TestComputeDiscoveryIsTheMerge(t *testing.T) {
	peers := threePeers()
	out, err := Compute(Input{Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	var api, apis []merge.PeerDocument
	for _, p := range peers {
		api = append(api, merge.PeerDocument{ServerID: p.ServerID, Groups: p.API})
		apis = append(apis, merge.PeerDocument{ServerID: p.ServerID, Groups: p.APIs})
	}
	wantAPI, wantAPIs := merge.Merge(api, nil), merge.Merge(apis, nil)
	st := out.Discovery.Status
	if out.Discovery.Name != v1alpha1.PeerAggregatedDiscoveryName {
		t.Errorf("name %q", out.Discovery.Name)
	}
	assertEqual(t, "/api", wantAPI, st.API.Items)
	assertEqual(t, "/apis", wantAPIs, st.APIs.Items)
	if e, _ := merge.ETag(wantAPI); st.API.ETag != e {
		t.Errorf("/api ETag %q, want %q", st.API.ETag, e)
	}
	if e, _ := merge.ETag(wantAPIs); st.APIs.ETag != e {
		t.Errorf("/apis ETag %q, want %q", st.APIs.ETag, e)
	}
	// Not-ready (stale) c's apps/v1beta1 is still in the merged discovery.
	if !hasGV(st.APIs.Items, "apps", "v1beta1") {
		t.Error("apps/v1beta1 of the stale peer missing")
	}
}

func TestComputeEmpty(t *testing.T) {
	out, err := Compute(Input{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Peers) != 0 || len(out.Routes) != 0 {
		t.Errorf("objects from nothing: %+v", out)
	}
	d := out.Discovery
	if d == nil || d.Status.API.Items == nil || d.Status.APIs.Items == nil || len(d.Status.API.Items)+len(d.Status.APIs.Items) != 0 ||
		d.Status.API.ETag == "" || d.Status.APIs.ETag == "" {
		t.Errorf("empty discovery: %+v", d)
	}
}

func TestComputeDeterministic(t *testing.T) {
	base := threePeers()
	for _, p := range realisticPeers(3, 3, 600) {
		p.ServerID = "r-" + p.ServerID
		base = append(base, p)
	}
	base[4].Left, base[4].LeftTime = true, t0
	clusterWide := map[schema.GroupVersion]string{{Group: "group001.example.k8s.io", Version: "v1"}: SourceCRD}
	excluded := func(g, v string) bool { return g == "group002.example.k8s.io" }
	want, err := Compute(Input{Peers: base, ClusterWide: clusterWide, Excluded: excluded})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		perm := slices.Clone(base)
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for j := range perm { // sources in any order too
			perm[j].Sources = slices.Clone(perm[j].Sources)
			slices.Reverse(perm[j].Sources)
		}
		got, err := Compute(Input{Peers: perm, ClusterWide: clusterWide, Excluded: excluded})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("permutation %d: output differs:\n%s", i, diff.Diff(want, got))
		}
	}
}

func assertEqual(t *testing.T, what string, want, got any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s differs (- want, + got):\n%s", what, diff.Diff(want, got))
	}
}

// TestComputeRecordedListMergesLast: a peer known only from the list its
// Lease records (this replica never read it) has entries without kinds
// when the record predates kinds; merged first (its ID sorts first), they
// made the merged core group's configmaps kind-less, which client-go drops
// from discovery without an error: the namespace controller then deleted
// a namespace without its ConfigMaps (chaos soak, seed 4923, in CI). A
// read document's entries must win whatever the IDs.
func TestComputeRecordedListMergesLast(t *testing.T) {
	cm := res("configmaps")
	cm.ResponseKind = &metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	read := readyPeer("kube-apiserver-b", docs(grp("", ver("v1", cm))), nil)
	recorded := Peer{ServerID: "kube-apiserver-a", HasDocument: true, Recorded: true,
		API: docs(grp("", ver("v1",
			apidiscoveryv2.APIResourceDiscovery{Resource: "configmaps", Scope: apidiscoveryv2.ScopeNamespace},
			apidiscoveryv2.APIResourceDiscovery{Resource: "secrets", Scope: apidiscoveryv2.ScopeNamespace})))}
	out, err := Compute(Input{Peers: []Peer{recorded, read}})
	if err != nil {
		t.Fatal(err)
	}
	core := out.Discovery.Status.API.Items
	if len(core) != 1 || len(core[0].Versions) != 1 {
		t.Fatalf("merged /api: %+v", core)
	}
	got := map[string]apidiscoveryv2.APIResourceDiscovery{}
	for _, r := range core[0].Versions[0].Resources {
		got[r.Resource] = r
	}
	if r := got["configmaps"]; r.ResponseKind == nil || r.ResponseKind.Kind == "" {
		t.Errorf("configmaps merged without a kind: %+v (the recorded list came first)", r)
	}
	if _, ok := got["secrets"]; !ok {
		t.Error("secrets, served only by the recorded peer, left out of the merged view")
	}
	if src := out.Discovery.Status.Sources; len(src) != 2 || src[0].ServerID != "kube-apiserver-a" {
		t.Errorf("sources %+v: want both, by server ID", src)
	}
}
