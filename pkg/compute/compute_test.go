package compute

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/validation"

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
		ready       int32
		servedByAll bool
		scope       apidiscoveryv2.ResourceScope
	}
	all := []string{"kube-apiserver-a", "kube-apiserver-b", "kube-apiserver-c"}
	wants := map[string]want{
		"pods.v1.core":             {all, 2, true, apidiscoveryv2.ScopeNamespace},
		"nodes.v1.core":            {all, 2, true, apidiscoveryv2.ScopeCluster},
		"configmaps.v1.core":       {[]string{"kube-apiserver-a", "kube-apiserver-b"}, 2, false, apidiscoveryv2.ScopeNamespace},
		"deployments.v1.apps":      {all, 2, true, apidiscoveryv2.ScopeNamespace},
		"deployments.v1beta1.apps": {[]string{"kube-apiserver-c"}, 0, false, apidiscoveryv2.ScopeNamespace},
		"jobs.v1.batch":            {[]string{"kube-apiserver-b"}, 1, false, apidiscoveryv2.ScopeNamespace},
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
		if rt.Status.ReadyPeers != w.ready || rt.Status.TotalPeers != 3 || rt.Status.ServedByAll != w.servedByAll {
			t.Errorf("%s: ready %d total %d servedByAll %v, want %d 3 %v", name, rt.Status.ReadyPeers, rt.Status.TotalPeers, rt.Status.ServedByAll, w.ready, w.servedByAll)
		}
		if rt.Spec.Scope != w.scope || rt.Status.ClusterWide || rt.Status.ClusterWideSource != "" {
			t.Errorf("%s: scope %q clusterWide %v %q", name, rt.Spec.Scope, rt.Status.ClusterWide, rt.Status.ClusterWideSource)
		}
		if RouteName(gvr(rt.Spec.Group, rt.Spec.Version, rt.Spec.Resource)) != name {
			t.Errorf("%s: spec %+v does not name it", name, rt.Spec)
		}
		for _, p := range rt.Status.Peers {
			if p.Endpoint != p.ServerID+".example:6443" || p.Left || p.Ready != (p.ServerID != "kube-apiserver-c") {
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

func TestComputeLeftPeer(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments"))), grp("only-a.example.com", ver("v1", res("things")))))
	b := readyPeer("b", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	left := t0.Add(time.Minute)
	a.Left, a.LeftTime, a.ReadyReason = true, left, "Left" // Ready left true on purpose: Left wins
	out, err := Compute(Input{Peers: []Peer{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	rt := routeByName(out, "things.v1.only-a.example.com")
	if rt == nil {
		t.Fatal("a left peer's route is gone before its tombstone expires")
	}
	if len(rt.Status.Peers) != 1 || !rt.Status.Peers[0].Left || rt.Status.Peers[0].Ready {
		t.Errorf("left peer in route: %+v", rt.Status.Peers)
	}
	if rt.Status.ReadyPeers != 0 || rt.Status.TotalPeers != 1 || rt.Status.ServedByAll {
		t.Errorf("route of a left peer: %+v", rt.Status)
	}
	if rt := routeByName(out, "deployments.v1.apps"); rt.Status.TotalPeers != 1 || !rt.Status.ServedByAll || rt.Status.ReadyPeers != 1 ||
		!slices.Equal(routePeerIDs(rt), []string{"a", "b"}) {
		t.Errorf("deployments: %+v", rt.Status)
	}
	// Listed while tombstoned, as stale: controllers that act on discovery
	// (namespace deletion, garbage collection) must see the GVR, whose
	// requests answer 503, until the tombstone expires.
	if !hasGV(out.Discovery.Status.APIs.Items, "only-a.example.com", "v1") {
		t.Error("a left peer's APIs left the merged discovery before its tombstone expired")
	}
	found := false
	for _, s := range out.Discovery.Status.Sources {
		if s.ServerID == "a" {
			found = true
			if !s.Stale {
				t.Error("a left peer is a fresh discovery source")
			}
		}
	}
	if !found {
		t.Error("a left peer is no discovery source while tombstoned")
	}
	p := peerByID(out, "a")
	if p.Status.LeftTime == nil || !p.Status.LeftTime.Time.Equal(left) {
		t.Errorf("leftTime = %v", p.Status.LeftTime)
	}
	if c := p.Status.Conditions[0]; c.Status != metav1.ConditionFalse || c.Reason != "Left" {
		t.Errorf("Ready condition of a left peer: %+v", c)
	}
}

// The last peer leaving keeps the merged discovery while its tombstone
// lasts; it empties when the peer is gone from the input (the tombstone
// expired).
func TestComputeLastPeerLeft(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	a.Left, a.LeftTime = true, t0
	out, err := Compute(Input{Peers: []Peer{a}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(out.Discovery.Status.API.Items) + len(out.Discovery.Status.APIs.Items); n == 0 {
		t.Error("merged discovery dropped a tombstoned peer's groups")
	}
	gone, err := Compute(Input{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(gone.Discovery.Status.API.Items) + len(gone.Discovery.Status.APIs.Items); n != 0 {
		t.Errorf("merged discovery keeps %d groups after the tombstone expired", n)
	}
	if len(out.Routes) != 4 {
		t.Errorf("tombstoned routes: %d, want 4", len(out.Routes))
	}
	for _, r := range out.Routes {
		if r.Status.TotalPeers != 0 || r.Status.ReadyPeers != 0 || r.Status.ServedByAll {
			t.Errorf("%s: %+v", r.Name, r.Status)
		}
	}
}

func TestComputePeerWithoutDocument(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	pending := Peer{
		ServerID: "b", Endpoint: "10.0.0.2:6443", ReadyReason: "Pending", ReadyMessage: "discovery not read yet", ReadyTransition: t0,
		// Documents without HasDocument are ignored.
		API: coreDoc, APIs: docs(grp("ghost.example.com", ver("v1", res("ghosts")))),
	}
	out, err := Compute(Input{Peers: []Peer{pending, a}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Routes {
		if slices.Contains(routePeerIDs(&r), "b") {
			t.Errorf("%s lists a peer with no document", r.Name)
		}
		// b is present but serves nothing known: nothing is served by all.
		if r.Status.TotalPeers != 2 || r.Status.ServedByAll {
			t.Errorf("%s: %+v", r.Name, r.Status)
		}
	}
	if hasGV(out.Discovery.Status.APIs.Items, "ghost.example.com", "v1") || len(out.Discovery.Status.Sources) != 1 {
		t.Errorf("discovery uses a peer with no document: %+v", out.Discovery.Status.Sources)
	}
	p := peerByID(out, "b")
	if p == nil {
		t.Fatal("a peer with no document has no APIServerPeer")
	}
	c := p.Status.Conditions[0]
	if c.Status != metav1.ConditionFalse || c.Reason != "Pending" || c.Message != "discovery not read yet" || p.Status.ResourceCount != 0 ||
		p.Status.GroupCount != 0 || p.Status.LastSyncTime != nil {
		t.Errorf("pending peer: %+v", p.Status)
	}
}

func TestComputeStalePeerKeepsDocument(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	b := readyPeer("b", coreDoc, docs(grp("new.example.com", ver("v1", res("widgets")))))
	b.Ready, b.Stale, b.ReadyReason, b.LastError = false, true, "ConnectionRefused", "ConnectionRefused /api: dial tcp: connection refused"
	out, err := Compute(Input{Peers: []Peer{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if !hasGV(out.Discovery.Status.APIs.Items, "new.example.com", "v1") {
		t.Error("a stale peer's last good document left the merged discovery")
	}
	want := []v1alpha1.DiscoverySource{
		{ServerID: "a"},
		{ServerID: "b", Stale: true},
	}
	assertEqual(t, "sources", want, out.Discovery.Status.Sources)
	rt := routeByName(out, "widgets.v1.new.example.com")
	if rt == nil || rt.Status.ReadyPeers != 0 || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].Ready || rt.Status.Peers[0].Left {
		t.Fatalf("route of a stale peer: %+v", rt)
	}
	p := peerByID(out, "b")
	if !p.Status.Stale || p.Status.LastError == "" || p.Status.Conditions[0].Reason != "ConnectionRefused" || p.Status.Conditions[0].Status != metav1.ConditionFalse {
		t.Errorf("stale peer status: %+v", p.Status)
	}
}

func TestComputePeerObjects(t *testing.T) {
	a := readyPeer("kube-apiserver-a", coreDoc, docs(
		grp("apps", ver("v1", res("deployments"), res("statefulsets")), ver("v1beta1", res("deployments"))),
		grp("batch", ver("v1", res("jobs"))),
	))
	a.Sources = []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease, v1alpha1.PeerSourceEndpointSlice}
	sourcesBefore := slices.Clone(a.Sources)
	// The same core group in /apis (a broken server) counts once.
	a.APIs = append(slices.Clone(a.APIs), coreDoc[0])
	noReason := Peer{ServerID: "10.0.0.9:6443", Endpoint: "10.0.0.9:6443", Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice}}
	in := []Peer{a, noReason}
	out, err := Compute(Input{Peers: in})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in[0].Sources, sourcesBefore) {
		t.Error("Compute modified its input's sources")
	}
	want := v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-a"},
		Spec: v1alpha1.APIServerPeerSpec{
			ServerID: "kube-apiserver-a", Endpoint: "kube-apiserver-a.example:6443", BinaryVersion: "v1.37.2",
			Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceRegistrationLease},
		},
		Status: v1alpha1.APIServerPeerStatus{
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "DiscoverySynced", LastTransitionTime: metav1.NewTime(t0),
			}},
			LastSyncTime:  &metav1.Time{Time: t0},
			DiscoveryETag: `"apis-kube-apiserver-a"`,
			GroupCount:    3, // "", apps, batch
			ResourceCount: 7, // pods configmaps nodes deployments statefulsets deployments(v1beta1) jobs
		},
	}
	assertEqual(t, "APIServerPeer", want, *peerByID(out, "kube-apiserver-a"))
	p := peerByID(out, "10.0.0.9:6443")
	if p.Name != "10.0.0.9-6443" || p.Status.Conditions[0].Reason != "Unknown" || p.Status.Conditions[0].Status != metav1.ConditionFalse {
		t.Errorf("address peer: %s %+v", p.Name, p.Status.Conditions)
	}
	if out.Peers[0].Spec.ServerID != "10.0.0.9:6443" || out.Peers[1].Spec.ServerID != "kube-apiserver-a" {
		t.Error("peers not sorted by server ID")
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

func TestRouteName(t *testing.T) {
	for _, tc := range []struct {
		gvr  schema.GroupVersionResource
		want string // "hash" = a hashed name
	}{
		{gvr("", "v1", "pods"), "pods.v1.core"},
		{gvr("apps", "v1", "deployments"), "deployments.v1.apps"},
		{gvr("stable.example.com", "v1beta1", "crontabs"), "crontabs.v1beta1.stable.example.com"},
		{gvr("x-y.io", "v2alpha1", "a-b"), "a-b.v2alpha1.x-y.io"},
		// Not valid object names, or ambiguous: hashed.
		{gvr("apps", "v1", "Deployments"), "hash"},
		{gvr("apps", "v1", "under_score"), "hash"},
		{gvr("apps", "v1", "dotted.name"), "hash"},
		{gvr("apps", "v1", "-leading"), "hash"},
		{gvr("apps", "v1", "trailing-"), "hash"},
		{gvr("core", "v1", "pods"), "hash"}, // would collide with the legacy pods.v1.core
		{gvr(strings.Repeat("g", 63)+"."+strings.Repeat("h", 63)+"."+strings.Repeat("i", 63)+"."+strings.Repeat("j", 50), "v1", "widget"), "widget.v1." + strings.Repeat("g", 63) + "." + strings.Repeat("h", 63) + "." + strings.Repeat("i", 63) + "." + strings.Repeat("j", 50)},
		{gvr(strings.Repeat("g", 63)+"."+strings.Repeat("h", 63)+"."+strings.Repeat("i", 63)+"."+strings.Repeat("j", 50), "v1", "widgetsxx"), "hash"},
	} {
		got := RouteName(tc.gvr)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("RouteName(%v) = %q is not a valid name: %v", tc.gvr, got, errs)
		}
		switch {
		case tc.want == "hash":
			if !strings.HasPrefix(got, "gvr-") || len(got) != 36 || strings.Contains(got, ".") {
				t.Errorf("RouteName(%v) = %q, want a hashed name", tc.gvr, got)
			}
		case got != tc.want:
			t.Errorf("RouteName(%v) = %q, want %q", tc.gvr, got, tc.want)
		}
	}
	// Dotted resources would otherwise collide across GVRs.
	a, b := RouteName(gvr("v1.g", "b", "a")), RouteName(gvr("g", "v1", "a.b"))
	if a == b {
		t.Errorf("%q for two GVRs", a)
	}
	if RouteName(gvr("", "v1", "pods")) == RouteName(gvr("core", "v1", "pods")) {
		t.Error("group core collides with the legacy group")
	}
}

// Peers' documents may carry such names (Validate admits any URL path
// segment as a resource), and Compute still names every route validly.
func TestComputeUnnamableGVRs(t *testing.T) {
	apis := docs(grp("core", ver("v1", res("pods"))), grp("apps", ver("v1", res("Deployments"), res("a.b"))))
	if err := merge.Validate(apis); err != nil {
		t.Fatalf("merge.Validate rejects the document: %v", err)
	}
	out, err := Compute(Input{Peers: []Peer{readyPeer("a", coreDoc, apis)}})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range out.Routes {
		if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 || names[r.Name] {
			t.Errorf("route %q for %+v: invalid or repeated", r.Name, r.Spec)
		}
		names[r.Name] = true
	}
	if len(out.Routes) != 6 { // pods configmaps nodes (legacy), pods (group core), Deployments, a.b
		t.Errorf("%d routes, want 6", len(out.Routes))
	}
	if rt := routeByName(out, "pods.v1.core"); rt == nil || rt.Spec.Group != "" {
		t.Errorf("the legacy pods route is not pods.v1.core: %+v", rt)
	}
}

func TestPeerName(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"kube-apiserver-a", "kube-apiserver-a"},
		{"apiserver-6bnt3svmhcsxqo2yqhjzgguoaq", "apiserver-6bnt3svmhcsxqo2yqhjzgguoaq"},
		{"10.0.0.1:6443", "10.0.0.1-6443"},
		{"[fd00::1]:6443", "fd00--1-6443"},
		{"[FD00::1]:6443", "fd00--1-6443"},
		{"host_1", "host-1"},
		{"[::ffff:a00:1]:6443", "hash"}, // "--ffff-..." starts with a dash
		{"", "hash"},
	} {
		got := PeerName(tc.id)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("PeerName(%q) = %q is not a valid name: %v", tc.id, got, errs)
		}
		if tc.want == "hash" {
			if !strings.HasPrefix(got, "peer-") || len(got) != 37 {
				t.Errorf("PeerName(%q) = %q, want a hashed name", tc.id, got)
			}
		} else if got != tc.want {
			t.Errorf("PeerName(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

func TestIsDNSSubdomainMatchesValidation(t *testing.T) {
	for _, s := range []string{
		"", "a", "-", "a-", "-a", "a.b", "a..b", ".a", "a.", "a-.b", "a.-b", "A", "a_b", "0", "0.0", "a--b",
		strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("a", 64), "a.b-c.d", "é",
	} {
		if got, want := isDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0; got != want {
			t.Errorf("isDNSSubdomain(%q) = %v, validation says %v", s, got, want)
		}
	}
}

func assertEqual(t *testing.T, what string, want, got any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s differs (- want, + got):\n%s", what, diff.Diff(want, got))
	}
}
