package routing

import (
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

var (
	deployments = gvr("apps", "v1", "deployments")
	namespaces  = gvr("", "v1", "namespaces")
)

// reviewTable: pods and namespaces are served by every peer; deployments
// by a and b; widgets by a (ready), c (not ready) and d (left).
func reviewTable() *Table {
	return NewTable([]*v1alpha1.PeerRoutingTable{
		rt(pods, servedByAll, withPeers(ready("a"), ready("b"), ready("c"))),
		rt(namespaces, servedByAll, withPeers(ready("a"), ready("b"), ready("c"))),
		rt(deployments, withPeers(ready("a"), ready("b"))),
		rt(widgets, withPeers(ready("a"), notReady("c"), left("d"))),
		rt(crds, clusterWide("CustomResourceDefinition"), withPeers(ready("a"))),
		rt(onlyLeft, withPeers(left("a"), left("b"))),
	}, nil)
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
		{"/api/v1", false, [3]string{}},
		{"/apis", false, [3]string{}},
		{"/apis/apps", false, [3]string{}},
		{"/apis/apps/v1", false, [3]string{}},
		{"/openapi/v3/apis/apps/v1", false, [3]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			st, err := Review(table, v1alpha1.RouteReviewSpec{Verb: "get", Path: tc.path, SourcePeer: "a"})
			if err != nil {
				t.Fatal(err)
			}
			got := [3]string{st.Group, st.Version, st.Resource}
			if got != tc.gvr {
				t.Fatalf("GVR = %v, want %v", got, tc.gvr)
			}
			if st.Reason == "" {
				t.Fatal("empty reason")
			}
			if !tc.resource {
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
	// method alike); every spelling is accepted.
	for _, verb := range []string{"get", "GET", "list", "watch", "create", "POST", "update", "PUT", "patch", "PATCH",
		"delete", "DELETE", "deletecollection", "Get", "head", "options", "proxy"} {
		st, err := Review(table, v1alpha1.RouteReviewSpec{Verb: verb, Path: "/apis/apps/v1/namespaces/ns1/deployments", SourcePeer: "c"})
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if st.Decision != v1alpha1.RouteProxy || st.Resource != "deployments" {
			t.Fatalf("%s: %+v", verb, st)
		}
	}
	// The special verb in the path is parsed, whatever the verb field says.
	st, err := Review(table, v1alpha1.RouteReviewSpec{Verb: "watch", Path: "/apis/apps/v1/watch/deployments", SourcePeer: "c"})
	if err != nil || st.Resource != "deployments" || st.Decision != v1alpha1.RouteProxy {
		t.Fatalf("watch path: %+v, %v", st, err)
	}
}

func TestReviewSourcePeer(t *testing.T) {
	table := reviewTable()
	cases := []struct {
		name       string
		path       string
		source     string
		want       v1alpha1.RouteDecision
		target     string
		endpoint   string
		candidates []string
		reason     string
	}{{
		name: "no source: served by all is local",
		path: "/api/v1/namespaces/ns1/pods", want: v1alpha1.RouteLocal,
		reason: "served by this server",
	}, {
		name: "no source: not served by all is proxied",
		path: "/apis/apps/v1/deployments", want: v1alpha1.RouteProxy,
		target: expectedOrder("", []string{"a", "b"})[0], endpoint: endpointOf(expectedOrder("", []string{"a", "b"})[0]),
		candidates: expectedOrder("", []string{"a", "b"}), reason: "proxy to",
	}, {
		name: "source listed: served there",
		path: "/apis/apps/v1/namespaces/ns1/deployments/d1", source: "b", want: v1alpha1.RouteLocal,
		reason: "apps/v1/deployments is served by this server",
	}, {
		name: "source listed although not ready: it still serves it itself",
		path: "/apis/example.com/v1/widgets", source: "c", want: v1alpha1.RouteLocal,
	}, {
		name: "source not listed: proxied to a ready peer, never to itself",
		path: "/apis/apps/v1/namespaces/ns1/deployments", source: "c", want: v1alpha1.RouteProxy,
		target: expectedOrder("c", []string{"a", "b"})[0], endpoint: endpointOf(expectedOrder("c", []string{"a", "b"})[0]),
		candidates: expectedOrder("c", []string{"a", "b"}),
	}, {
		name: "source not listed: only the ready peer is a candidate",
		path: "/apis/example.com/v1/widgets/w1", source: "b", want: v1alpha1.RouteProxy,
		target: "a", endpoint: endpointOf("a"), candidates: []string{"a"},
	}, {
		name: "source listed but left: the others decide",
		path: "/apis/example.com/v1/widgets", source: "d", want: v1alpha1.RouteProxy,
		target: "a", endpoint: endpointOf("a"), candidates: []string{"a"},
	}, {
		name: "source left, the other listed peer left too: 503",
		path: "/apis/example.com/v1/departed", source: "a", want: v1alpha1.RouteUnavailable,
		candidates: []string{"a", "b"}, reason: "none is ready",
	}, {
		name: "only tombstoned peers: 503",
		path: "/apis/example.com/v1/departed", source: "z", want: v1alpha1.RouteUnavailable,
		candidates: []string{"a", "b"}, reason: "served by a, b but none is ready",
	}, {
		name: "cluster-wide: local",
		path: "/apis/crd.example.com/v1/things", source: "z", want: v1alpha1.RouteLocal,
		candidates: []string{"a"}, reason: "CustomResourceDefinition",
	}, {
		name: "unknown: not found",
		path: "/apis/nowhere.example.com/v1/ghosts", source: "a", want: v1alpha1.RouteNotFound,
		reason: "no peer serves",
	}, {
		name: "unknown source, unknown GVR",
		path: "/apis/nowhere.example.com/v1/ghosts", want: v1alpha1.RouteNotFound,
	}}
	// Served locally nothing would be tried: no candidates. Otherwise the
	// candidates are the ready peers in the order tried (Proxy) or every
	// peer listed with its state (Unavailable, cluster-wide).
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Review(table, v1alpha1.RouteReviewSpec{Verb: "get", Path: tc.path, SourcePeer: tc.source})
			if err != nil {
				t.Fatal(err)
			}
			if st.Decision != tc.want || st.Target != tc.target || st.TargetEndpoint != tc.endpoint {
				t.Fatalf("got %s -> %q (%q), want %s -> %q (%q); reason %q", st.Decision, st.Target, st.TargetEndpoint, tc.want, tc.target, tc.endpoint, st.Reason)
			}
			if got := reviewIDs(st.Candidates); !reflect.DeepEqual(got, tc.candidates) {
				t.Fatalf("candidates = %v, want %v", got, tc.candidates)
			}
			if st.Reason == "" || !strings.Contains(st.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to contain %q", st.Reason, tc.reason)
			}
		})
	}
}

// TestReviewCandidatesCarryState: the review shows each candidate's state.
func TestReviewCandidatesCarryState(t *testing.T) {
	st, err := Review(reviewTable(), v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/example.com/v1/departed", SourcePeer: "z"})
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.RoutingPeer{
		{ServerID: "a", Endpoint: endpointOf("a"), Ready: true, Left: true},
		{ServerID: "b", Endpoint: endpointOf("b"), Ready: true, Left: true},
	}
	if !reflect.DeepEqual(st.Candidates, want) {
		t.Fatalf("candidates = %+v, want %+v", st.Candidates, want)
	}
}

// TestReviewMatchesDecide: the review is the filter's decision.
func TestReviewMatchesDecide(t *testing.T) {
	table := reviewTable()
	for _, path := range []string{"/api/v1/pods", "/apis/apps/v1/deployments", "/apis/example.com/v1/widgets", "/apis/example.com/v1/departed", "/apis/x/v1/y"} {
		for _, src := range []string{"a", "b", "c", "z"} {
			st, err := Review(table, v1alpha1.RouteReviewSpec{Verb: "list", Path: path, SourcePeer: src})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.ParseRequestURI(path)
			info, _ := RequestInfoFactory.NewRequestInfo(&http.Request{Method: http.MethodGet, URL: u})
			g := gvr(info.APIGroup, info.APIVersion, info.Resource)
			// The filter's local view of server src: what the table lists for it.
			local := LocalFunc(func(g2 schema.GroupVersionResource) bool {
				r := table.Lookup(g2)
				if r == nil {
					return false
				}
				for _, p := range r.Peers {
					if p.ID == src && !p.Left {
						return true
					}
				}
				return false
			})
			res := Decide(table, Request{IsResourceRequest: true, GVR: g}, src, local)
			if res.Decision != st.Decision || res.Reason() != st.Reason {
				t.Fatalf("%s from %s: review %s %q, decide %s %q", path, src, st.Decision, st.Reason, res.Decision, res.Reason())
			}
		}
	}
}

func TestReviewInvalidPath(t *testing.T) {
	for _, path := range []string{"", "apis/apps/v1/deployments", "%zz", "/api/v1/watch", "/apis/apps/v1/proxy"} {
		_, err := Review(reviewTable(), v1alpha1.RouteReviewSpec{Verb: "get", Path: path})
		if err == nil {
			t.Errorf("path %q: no error", path)
			continue
		}
		if !strings.HasPrefix(err.Error(), "spec.path: ") {
			t.Errorf("path %q: error %q does not name spec.path", path, err)
		}
	}
}
