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

package merge

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strconv"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/client-go/discovery"
)

// Differential tests against upstream's own merge, through its exported API
// (k8s.io/apiserver v0.37.2 pkg/endpoints/discovery/aggregated):
// NewPeerAggregatedDiscoveryHandler fed by a PeerDiscoveryProvider and a real
// ResourceManager for the local server, queried over HTTP; and the exported
// TestMergeResources, which is the same mergeResources without HTTP.

type staticPeers map[string][]apidiscoveryv2.APIGroupDiscovery

func (p staticPeers) GetPeerResources() map[string][]apidiscoveryv2.APIGroupDiscovery { return p }

// localMode selects how the documents are split between upstream's local
// server and its peers.
type localMode int

const (
	// localEmpty: the local server serves nothing and every document is a
	// peer's. Upstream then merges exactly the given documents.
	localEmpty localMode = iota
	// localFirst: the document whose ID sorts first is the local server's,
	// loaded into a ResourceManager with priorities reproducing its order.
	// Upstream returns the local list unmerged when nothing changed
	// (its mergeResources); with the first ID local that equals its general
	// path, which is what Merge implements.
	localFirst
)

// upstreamHTTP serves the documents through upstream's peer-aggregated
// handler and returns the decoded items and the ETag header.
func upstreamHTTP(t testing.TB, docs []PeerDocument, exclude func(g, v string) bool, mode localMode) ([]apidiscoveryv2.APIGroupDiscovery, string) {
	t.Helper()
	sorted := append([]PeerDocument(nil), docs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ServerID < sorted[j].ServerID })

	local := aggregated.NewResourceManager("apis")
	localID := "" // sorts before any real ID; serves nothing
	peers := staticPeers{}
	for i, d := range sorted {
		groups := filterForUpstream(d.Groups, exclude)
		if i == 0 && mode == localFirst {
			localID = d.ServerID
			loadLocal(local, groups)
			continue
		}
		peers[d.ServerID] = groups
	}

	h := aggregated.NewPeerAggregatedDiscoveryHandler(localID, local, peers, "apis")
	req := httptest.NewRequest(http.MethodGet, "/apis", nil)
	req.Header.Set("Accept", discovery.AcceptV2)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("upstream handler: status %d: %s", rec.Code, rec.Body.String())
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatalf("decode upstream response: %v", err)
	}
	etag, err := strconv.Unquote(rec.Header().Get("ETag"))
	if err != nil {
		t.Fatalf("upstream ETag header %q: %v", rec.Header().Get("ETag"), err)
	}
	return list.Items, etag
}

// loadLocal makes a ResourceManager serve groups in exactly the given order:
// it orders groups by priority, then name, and versions by priority, then
// kube-aware version order ((*resourceDiscoveryManager).calculateAPIGroupsLocked), so descending priorities
// pin the order. Its groups carry only a name, as the test documents do.
func loadLocal(rm aggregated.ResourceManager, groups []apidiscoveryv2.APIGroupDiscovery) {
	rm.SetGroups(groups)
	for gi, g := range groups {
		for vi, v := range g.Versions {
			rm.SetGroupVersionPriority(metav1.GroupVersion{Group: g.Name, Version: v.Version}, 1_000_000-gi, 1000-vi)
		}
	}
}

// upstreamMerge calls upstream's exported TestMergeResources with the first
// document (by ID) as the local server and the others as peers.
func upstreamMerge(docs []PeerDocument, exclude func(g, v string) bool) []apidiscoveryv2.APIGroupDiscovery {
	if len(docs) == 0 {
		return nil
	}
	first := 0
	for i := range docs {
		if docs[i].ServerID < docs[first].ServerID {
			first = i
		}
	}
	peers := make(map[string][]apidiscoveryv2.APIGroupDiscovery, len(docs)-1)
	for i, d := range docs {
		if i != first {
			peers[d.ServerID] = filterForUpstream(d.Groups, exclude)
		}
	}
	return aggregated.TestMergeResources(docs[first].ServerID, filterForUpstream(docs[first].Groups, exclude), peers)
}

// jsonRoundTrip is what a client of either server would decode.
func jsonRoundTrip(t testing.TB, groups []apidiscoveryv2.APIGroupDiscovery) []apidiscoveryv2.APIGroupDiscovery {
	t.Helper()
	b, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: groups})
	if err != nil {
		t.Fatal(err)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func differentialCases() []struct {
	name    string
	docs    []PeerDocument
	exclude func(g, v string) bool
} {
	type tc = struct {
		name    string
		docs    []PeerDocument
		exclude func(g, v string) bool
	}
	all := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	return []tc{
		{name: "single server", docs: []PeerDocument{
			doc("a", grp("apps", ver("v1", res("deployments", all...), res("statefulsets", all...)))),
		}},
		{name: "identical servers", docs: []PeerDocument{
			doc("b", grp("apps", ver("v1", res("deployments", all...))), grp("batch", ver("v1", res("jobs", all...)))),
			doc("a", grp("apps", ver("v1", res("deployments", all...))), grp("batch", ver("v1", res("jobs", all...)))),
		}},
		{name: "rolling upgrade: new group, version and resource on the new server", docs: []PeerDocument{
			doc("old", grp("apps", ver("v1", res("deployments", all...))), grp("batch", ver("v1", res("jobs", all...)))),
			doc("new",
				grp("apps", ver("v1", res("deployments", all...), res("replicasets", all...))),
				grp("resource.k8s.io", ver("v1", res("resourceclaims", all...)), ver("v1beta2", res("resourceclaims", all...))),
				grp("batch", ver("v1", res("jobs", all...)), ver("v2alpha1", res("cronjobs", "get", "list")))),
		}},
		{name: "verbs differ and are unioned and sorted", docs: []PeerDocument{
			doc("a", grp("g.io", ver("v1", res("widgets", "watch", "get", "list")))),
			doc("b", grp("g.io", ver("v1", res("widgets", "patch", "get")))),
			doc("c", grp("g.io", ver("v1", res("widgets", "watch", "get", "list")))),
		}},
		{name: "identical unsorted verbs stay as they are", docs: []PeerDocument{
			doc("a", grp("g.io", ver("v1", res("widgets", "watch", "get", "list")))),
			doc("b", grp("g.io", ver("v1", res("widgets", "watch", "get", "list")))),
		}},
		{name: "subresources unioned, later server wins a name", docs: []PeerDocument{
			doc("a", grp("apps", ver("v1", withSubs(res("deployments", all...), sub("status", "get"))))),
			doc("b", grp("apps", ver("v1", withSubs(res("deployments", all...), sub("scale", "get", "update"), sub("status", "get", "patch"))))),
		}},
		{name: "conflicting group order falls back to topological order", docs: []PeerDocument{
			doc("a", grp1("x.io"), grp1("y.io"), grp1("w.io")),
			doc("b", grp1("y.io"), grp1("x.io"), grp1("z.io")),
			doc("c", grp1("q.io"), grp1("z.io")),
		}},
		{name: "pairwise version order differs from a one-shot merge", docs: []PeerDocument{
			doc("s1", grp("g.io", ver("v2", res("a", "get")), ver("v1", res("a", "get")))),
			doc("s2", grp("g.io", ver("v1", res("a", "get")), ver("v2", res("a", "get")))),
			doc("s3", grp("g.io", ver("v0", res("a", "get")))),
		}},
		{name: "superset list wins over a conflicting first list", docs: []PeerDocument{
			doc("a", grp("g.io", ver("v1", res("x", "get"), res("y", "get")))),
			doc("b", grp("g.io", ver("v1", res("z", "get"), res("y", "get"), res("x", "get")))),
		}},
		{name: "first server's fields win conflicts", docs: []PeerDocument{
			doc("b", grp("g.io", apidiscoveryv2.APIVersionDiscovery{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessStale, Resources: []apidiscoveryv2.APIResourceDiscovery{{
				Resource: "widgets", Scope: apidiscoveryv2.ScopeCluster, SingularResource: "widgetb",
				ResponseKind: &metav1.GroupVersionKind{Group: "g.io", Version: "v1", Kind: "WidgetB"},
				ShortNames:   []string{"wb"}, Categories: []string{"b"}, Verbs: []string{"get", "watch"},
			}}})),
			doc("a", grp("g.io", apidiscoveryv2.APIVersionDiscovery{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent, Resources: []apidiscoveryv2.APIResourceDiscovery{{
				Resource: "widgets", Scope: apidiscoveryv2.ScopeNamespace, SingularResource: "widgeta",
				ResponseKind: &metav1.GroupVersionKind{Group: "g.io", Version: "v1", Kind: "WidgetA"},
				ShortNames:   []string{"wa"}, Categories: []string{"a"}, Verbs: []string{"get", "list"},
			}}})),
		}},
		{name: "exclusion of CRD group-versions", exclude: func(g, v string) bool { return g == "crd.io" && v == "v1beta1" || g == "gone.io" },
			docs: []PeerDocument{
				doc("a", grp("crd.io", ver("v1", res("things", all...)), ver("v1beta1", res("things", all...))), grp("gone.io", ver("v1", res("x", "get")))),
				doc("b", grp("gone.io", ver("v1", res("x", "get"))), grp("crd.io", ver("v1beta1", res("things", all...)))),
			}},
		{name: "realistic 3 servers", docs: realisticDocs(1, 3, 600)},
		{name: "realistic 5 servers", docs: realisticDocs(2, 5, 300)},
	}
}

func TestDifferentialUpstreamHTTP(t *testing.T) {
	for _, tc := range differentialCases() {
		for _, mode := range []localMode{localEmpty, localFirst} {
			t.Run(tc.name+"/"+[]string{"local-empty", "local-first"}[mode], func(t *testing.T) {
				ours := Merge(tc.docs, tc.exclude)
				theirs, theirETag := upstreamHTTP(t, tc.docs, tc.exclude, mode)
				if got, want := shape(ours), shape(theirs); got != want {
					t.Fatalf("shape differs\nours:     %s\nupstream: %s", got, want)
				}
				if !reflect.DeepEqual(jsonRoundTrip(t, ours), theirs) {
					t.Fatalf("decoded documents differ\nours:     %+v\nupstream: %+v", jsonRoundTrip(t, ours), theirs)
				}
				ourETag, err := ETag(ours)
				if err != nil {
					t.Fatal(err)
				}
				if ourETag != theirETag {
					t.Errorf("ETag: ours %s, upstream %s", ourETag, theirETag)
				}
			})
		}
	}
}

func TestDifferentialUpstreamMergeResources(t *testing.T) {
	for _, tc := range differentialCases() {
		t.Run(tc.name, func(t *testing.T) {
			ours := Merge(tc.docs, tc.exclude)
			theirs := upstreamMerge(tc.docs, tc.exclude)
			if !reflect.DeepEqual(ours, theirs) {
				t.Fatalf("differs\nours:     %s\nupstream: %s", shape(ours), shape(theirs))
			}
		})
	}
}
