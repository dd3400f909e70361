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
	"reflect"
	"slices"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMergeShape(t *testing.T) {
	all := []string{"create", "delete", "get", "list", "watch"}
	tests := []struct {
		name    string
		docs    []PeerDocument
		exclude func(g, v string) bool
		want    string // shape() of the result
	}{
		{
			name: "no documents",
			want: "",
		},
		{
			name: "documents without groups",
			docs: []PeerDocument{doc("a"), doc("b", []apidiscoveryv2.APIGroupDiscovery{}...)},
			want: "",
		},
		{
			name: "single document is returned as is",
			docs: []PeerDocument{doc("a", grp("b.io", ver("v1", res("zs", "list", "get"))), grp("a.io", ver("v2"), ver("v1")))},
			want: "b.io{v1[zs[list get] ] } a.io{v2[] v1[] } ",
		},
		{
			name: "new group is placed where the server that has it puts it",
			docs: []PeerDocument{
				doc("a", grp1("apps"), grp1("batch")),
				doc("b", grp1("apps"), grp1("new.io"), grp1("batch")),
			},
			want: "apps{v1[things[get list] ] } new.io{v1[things[get list] ] } batch{v1[things[get list] ] } ",
		},
		{
			name: "unrelated groups are ordered by name between constraints",
			docs: []PeerDocument{
				doc("a", grp1("m.io"), grp1("z.io")),
				doc("b", grp1("b.io"), grp1("z.io")),
			},
			want: "b.io{v1[things[get list] ] } m.io{v1[things[get list] ] } z.io{v1[things[get list] ] } ",
		},
		{
			name: "servers are visited by ID, not input order",
			docs: []PeerDocument{
				doc("b", grp1("y.io"), grp1("x.io")),
				doc("a", grp1("x.io"), grp1("y.io")),
			},
			// Both lists cover everything: the first by ID ("a") wins.
			want: "x.io{v1[things[get list] ] } y.io{v1[things[get list] ] } ",
		},
		{
			name: "conflicting orders with no covering list fall back to lexicographic order",
			docs: []PeerDocument{
				doc("a", grp1("y.io"), grp1("x.io")),
				doc("b", grp1("x.io"), grp1("y.io"), grp1("w.io")),
				doc("c", grp1("a.io")),
			},
			want: "a.io{v1[things[get list] ] } w.io{v1[things[get list] ] } x.io{v1[things[get list] ] } y.io{v1[things[get list] ] } ",
		},
		{
			name: "versions fold pairwise in server order",
			docs: []PeerDocument{
				doc("s1", grp("g", ver("v2"), ver("v1"))),
				doc("s2", grp("g", ver("v1"), ver("v2"))),
				doc("s3", grp("g", ver("v0"))),
			},
			// s1+s2 keeps [v2 v1] (s1 covers all); + s3 sorts [v0 v2 v1].
			// One merge over all three lists would see a cycle: [v0 v1 v2].
			want: "g{v0[] v2[] v1[] } ",
		},
		{
			name: "resources merge in order",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", res("a", "get"), res("c", "get")))),
				doc("b", grp("g", ver("v1", res("a", "get"), res("b", "get"), res("c", "get")))),
			},
			want: "g{v1[a[get] b[get] c[get] ] } ",
		},
		{
			name: "verbs union sorted",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", res("r", "watch", "get")))),
				doc("b", grp("g", ver("v1", res("r", "list", "get", "list")))),
			},
			want: "g{v1[r[get list watch] ] } ",
		},
		{
			name: "identical resources keep their verbs as they are",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", res("r", "watch", "get", "get")))),
				doc("b", grp("g", ver("v1", res("r", "watch", "get", "get")))),
			},
			want: "g{v1[r[watch get get] ] } ",
		},
		{
			name: "subresources unioned by name and sorted",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", withSubs(res("r", all...), sub("status", "get"), sub("exec", "create"))))),
				doc("b", grp("g", ver("v1", withSubs(res("r", all...), sub("status", "get", "patch"), sub("attach", "create"))))),
			},
			want: "g{v1[r[create delete get list watch]/attach[create]/exec[create]/status[get patch] ] } ",
		},
		{
			name:    "exclude drops group-versions and emptied groups",
			exclude: func(g, v string) bool { return (g == "crd.io" && v == "v1beta1") || g == "gone.io" },
			docs: []PeerDocument{
				doc("a", grp("crd.io", ver("v1", res("x", "get")), ver("v1beta1", res("x", "get"))), grp("gone.io", ver("v1", res("y", "get"))), grp("empty.io")),
				doc("b", grp("crd.io", ver("v1beta1", res("x", "get")))),
			},
			want: "crd.io{v1[x[get] ] } empty.io{} ",
		},
		{
			name: "duplicate group in one document folds into the first",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", res("r", "get"))), grp("h", ver("v1")), grp("g", ver("v1", res("r", "list"), res("s", "get")), ver("v2"))),
				doc("b", grp("h", ver("v1")), grp("g", ver("v1", res("r", "get")))),
			},
			want: "g{v1[r[get list] s[get] ] v2[] } h{v1[] } ",
		},
		{
			name: "duplicate version and resource in one document fold",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", res("r", "get"), res("r", "list")), ver("v2"), ver("v1", res("s", "get")))),
			},
			want: "g{v1[r[get list] s[get] ] v2[] } ",
		},
		{
			name: "same server ID twice is merged",
			docs: []PeerDocument{
				doc("a", grp("g", ver("v1", res("r", "get")))),
				doc("a", grp("g", ver("v1", res("r", "list")))),
			},
			want: "g{v1[r[get list] ] } ",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(tc.docs, tc.exclude)
			if got == nil {
				t.Fatal("Merge returned nil")
			}
			if s := shape(got); s != tc.want {
				t.Errorf("got  %s\nwant %s", s, tc.want)
			}
			for _, p := range permutations(tc.docs) {
				if again := Merge(p, tc.exclude); !reflect.DeepEqual(again, got) {
					t.Errorf("permutation %v: got %s, want %s", ids(p), shape(again), shape(got))
				}
			}
		})
	}
}

func TestMergeFieldsFromFirstServer(t *testing.T) {
	kindA := &metav1.GroupVersionKind{Group: "g", Version: "v1", Kind: "A"}
	kindB := &metav1.GroupVersionKind{Group: "g", Version: "v1", Kind: "B"}
	resource := func(kind *metav1.GroupVersionKind, scope apidiscoveryv2.ResourceScope, short, cat string, verbs ...string) apidiscoveryv2.APIResourceDiscovery {
		return apidiscoveryv2.APIResourceDiscovery{
			Resource: "rs", SingularResource: "r-" + short, ResponseKind: kind, Scope: scope,
			ShortNames: []string{short}, Categories: []string{cat}, Verbs: verbs,
		}
	}
	group := func(label string, fresh apidiscoveryv2.DiscoveryFreshness, r apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIGroupDiscovery {
		return apidiscoveryv2.APIGroupDiscovery{
			ObjectMeta: metav1.ObjectMeta{Name: "g", Labels: map[string]string{"from": label}},
			Versions:   []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Freshness: fresh, Resources: []apidiscoveryv2.APIResourceDiscovery{r}}},
		}
	}
	tests := []struct {
		name string
		docs []PeerDocument
		want apidiscoveryv2.APIGroupDiscovery
	}{
		{
			name: "resources differ: first ID's fields, verbs unioned",
			docs: []PeerDocument{
				doc("z", group("z", apidiscoveryv2.DiscoveryFreshnessCurrent, resource(kindB, apidiscoveryv2.ScopeCluster, "b", "cb", "list", "get"))),
				doc("a", group("a", apidiscoveryv2.DiscoveryFreshnessStale, resource(kindA, apidiscoveryv2.ScopeNamespace, "a", "ca", "watch", "get"))),
			},
			want: group("a", apidiscoveryv2.DiscoveryFreshnessStale, resource(kindA, apidiscoveryv2.ScopeNamespace, "a", "ca", "get", "list", "watch")),
		},
		{
			name: "resources equal: only version freshness and group metadata differ",
			docs: []PeerDocument{
				doc("a", group("a", apidiscoveryv2.DiscoveryFreshnessCurrent, resource(kindA, apidiscoveryv2.ScopeNamespace, "a", "ca", "watch", "get"))),
				doc("b", group("b", apidiscoveryv2.DiscoveryFreshnessStale, resource(kindA, apidiscoveryv2.ScopeNamespace, "a", "ca", "watch", "get"))),
			},
			want: group("a", apidiscoveryv2.DiscoveryFreshnessCurrent, resource(kindA, apidiscoveryv2.ScopeNamespace, "a", "ca", "watch", "get")),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(tc.docs, nil)
			if len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if ours, theirs := got, upstreamMerge(tc.docs, nil); !reflect.DeepEqual(ours, theirs) {
				t.Errorf("upstream disagrees: %+v", theirs)
			}
		})
	}
}

func TestMergeNilAndEmpty(t *testing.T) {
	// reflect.DeepEqual tells nil from empty, so upstream merges these
	// resources, and the union of no verbs is nil: JSON "verbs":null.
	a := res("r")
	a.Verbs = nil
	b := res("r")
	b.Verbs = []string{}
	b.Subresources = []apidiscoveryv2.APISubresourceDiscovery{}
	got := Merge([]PeerDocument{doc("b", grp("g", ver("v1", b))), doc("a", grp("g", ver("v1", a)))}, nil)
	r := got[0].Versions[0].Resources[0]
	if r.Verbs != nil || r.Subresources != nil {
		t.Errorf("verbs %#v subresources %#v, want nil", r.Verbs, r.Subresources)
	}
	if theirs := upstreamMerge([]PeerDocument{doc("b", grp("g", ver("v1", b))), doc("a", grp("g", ver("v1", a)))}, nil); !reflect.DeepEqual(got, theirs) {
		t.Errorf("upstream disagrees: %#v", theirs)
	}

	// One side only: the empty slice survives the copy as an empty slice.
	got = Merge([]PeerDocument{doc("b", grp("g", ver("v1", b)))}, nil)
	if r := got[0].Versions[0].Resources[0]; r.Verbs == nil || r.Subresources == nil {
		t.Errorf("empty slices became nil: %#v", r)
	}
}

func TestMergeEmptyResourceName(t *testing.T) {
	// Upstream takes the other side's fields when the first has no resource
	// name (mergeResourceCapabilities), which only a nameless resource can trigger.
	a := apidiscoveryv2.APIResourceDiscovery{Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get"}}
	b := apidiscoveryv2.APIResourceDiscovery{Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"list"}}
	docs := []PeerDocument{doc("a", grp("g", ver("v1", a))), doc("b", grp("g", ver("v1", b)))}
	got := Merge(docs, nil)
	r := got[0].Versions[0].Resources[0]
	if r.Scope != apidiscoveryv2.ScopeNamespace || !slices.Equal(r.Verbs, []string{"get", "list"}) {
		t.Errorf("got %+v", r)
	}
	if theirs := upstreamMerge(docs, nil); !reflect.DeepEqual(got, theirs) {
		t.Errorf("upstream disagrees: %+v", theirs)
	}
}

func TestMergeDoesNotTouchInputs(t *testing.T) {
	docs := realisticDocs(7, 3, 600)
	// A duplicate inside a document and an exclusion exercise the copying paths.
	docs[0].Groups = append(docs[0].Groups, docs[0].Groups[3])
	before := deepCopyDocs(docs)
	exclude := func(g, v string) bool { return v == "v1alpha1" }

	got := Merge(docs, exclude)
	if !reflect.DeepEqual(docs, before) {
		t.Fatal("Merge modified its input")
	}

	// The result shares nothing with the inputs: scribbling over every slice
	// of the result leaves the inputs as they were.
	for gi := range got {
		g := &got[gi]
		g.Name = "x"
		for vi := range g.Versions {
			v := &g.Versions[vi]
			v.Version = "x"
			for ri := range v.Resources {
				r := &v.Resources[ri]
				r.Resource = "x"
				for i := range r.Verbs {
					r.Verbs[i] = "x"
				}
				for i := range r.ShortNames {
					r.ShortNames[i] = "x"
				}
				for i := range r.Categories {
					r.Categories[i] = "x"
				}
				if r.ResponseKind != nil {
					r.ResponseKind.Kind = "x"
				}
				for si := range r.Subresources {
					s := &r.Subresources[si]
					s.Subresource = "x"
					for i := range s.Verbs {
						s.Verbs[i] = "x"
					}
					if s.ResponseKind != nil {
						s.ResponseKind.Kind = "x"
					}
				}
			}
		}
	}
	if !reflect.DeepEqual(docs, before) {
		t.Fatal("the result aliases the input")
	}
}
