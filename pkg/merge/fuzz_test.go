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

// byteSource turns fuzz input into choices; it yields zeros once exhausted.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) next() byte {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return s.b[s.i-1]
}

func (s *byteSource) intn(n int) int { return int(s.next()) % n }

func (s *byteSource) pick(opts []string) string { return opts[s.intn(len(opts))] }

// pickNew picks a name not in used unless dups is set; ok is false when the
// pool is used up.
func (s *byteSource) pickNew(opts []string, used map[string]bool, dups bool) (string, bool) {
	start := s.intn(len(opts))
	for i := range opts {
		n := opts[(start+i)%len(opts)]
		if dups || !used[n] {
			used[n] = true
			return n, true
		}
	}
	return "", false
}

// Small name pools make collisions (shared groups, versions, resources,
// conflicting orders, duplicates inside a document) common. "" is in each
// pool: upstream treats it as a name like any other.
var (
	fuzzIDs       = []string{"a", "b", "c", "d", "e"}
	fuzzGroups    = []string{"", "apps", "batch", "x.io", "y.io", "z.io"}
	fuzzVersions  = []string{"v1", "v2", "v1beta1", "v1alpha1", ""}
	fuzzResources = []string{"pods", "jobs", "widgets", "things", "gadgets", ""}
	fuzzVerbs     = []string{"create", "delete", "get", "list", "patch", "update", "watch", "deletecollection"}
	fuzzSubs      = []string{"status", "scale", "log"}
)

func (s *byteSource) strs(pool []string) []string {
	mask := s.next()
	switch mask {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	var out []string
	for i, v := range pool {
		if mask&(1<<(i%8)) != 0 {
			out = append(out, v)
		}
	}
	if s.next()%8 == 0 { // unsorted or repeated, as a broken peer might send
		slices.Reverse(out)
		if len(out) > 0 {
			out = append(out, out[0])
		}
	}
	return out
}

func (s *byteSource) gvk() *metav1.GroupVersionKind {
	switch s.intn(4) {
	case 0:
		return nil
	default:
		return &metav1.GroupVersionKind{Group: s.pick(fuzzGroups), Version: "v1", Kind: s.pick([]string{"A", "B"})}
	}
}

func (s *byteSource) resource() apidiscoveryv2.APIResourceDiscovery {
	r := apidiscoveryv2.APIResourceDiscovery{
		ResponseKind:     s.gvk(),
		Scope:            apidiscoveryv2.ResourceScope(s.pick([]string{"Namespaced", "Cluster"})),
		SingularResource: s.pick([]string{"", "one"}),
		Verbs:            s.strs(fuzzVerbs),
	}
	if s.intn(4) == 0 {
		r.ShortNames = s.strs([]string{"po", "jb"})
		r.Categories = s.strs([]string{"all"})
	}
	for n := s.intn(3); n > 0; n-- {
		r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  s.pick(fuzzSubs),
			ResponseKind: s.gvk(),
			Verbs:        s.strs(fuzzVerbs[:4]),
		})
	}
	return r
}

func fuzzDocs(data []byte) ([]PeerDocument, func(g, v string) bool) {
	s := &byteSource{b: data}
	// Repeated names (in a document, or of servers) are allowed in a quarter
	// of the inputs; the others are what upstream can be compared on.
	dups := s.intn(4) == 0
	docs := make([]PeerDocument, 1+s.intn(4))
	ids := map[string]bool{}
	for i := range docs {
		docs[i].ServerID, _ = s.pickNew(fuzzIDs, ids, dups)
		groups := map[string]bool{}
		for ng := s.intn(5); ng > 0; ng-- {
			name, ok := s.pickNew(fuzzGroups, groups, dups)
			if !ok {
				break
			}
			g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
			versions := map[string]bool{}
			for nv := s.intn(4); nv > 0; nv-- {
				vname, ok := s.pickNew(fuzzVersions, versions, dups)
				if !ok {
					break
				}
				v := apidiscoveryv2.APIVersionDiscovery{
					Version:   vname,
					Freshness: apidiscoveryv2.DiscoveryFreshness(s.pick([]string{"", "Current", "Stale"})),
				}
				resources := map[string]bool{}
				for nr := s.intn(5); nr > 0; nr-- {
					r := s.resource()
					if r.Resource, ok = s.pickNew(fuzzResources, resources, dups); !ok {
						break
					}
					v.Resources = append(v.Resources, r)
				}
				g.Versions = append(g.Versions, v)
			}
			docs[i].Groups = append(docs[i].Groups, g)
		}
	}
	var exclude func(g, v string) bool
	if seed := s.next(); seed%3 == 1 {
		exclude = func(g, v string) bool { return (len(g)*7+len(v)*3+int(seed))%5 == 0 }
	}
	return docs, exclude
}

// FuzzMerge checks, on random documents: no panic; the same result for every
// order of the inputs; inputs untouched; the union property (every input GVR,
// verb and subresource appears, unless excluded, and nothing else does); no
// repeated names; verbs sorted and unique wherever servers disagreed; and,
// where upstream's preconditions hold, equality with upstream's merge.
func FuzzMerge(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0x1f})
	f.Add([]byte("\x02\x00\x02\x01\x02\x00\x01\x03\x05\x01\x01\x01\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	f.Add([]byte("\x03\x00\x03\x01\x03\x02\x02\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17"))
	f.Add([]byte("merge these peer discovery documents deterministically, please!"))
	f.Add([]byte("\x03\x00\x04\x01\x02\x03\x04\x00\x02\x01\x03\x02\x01\x00\x04\x03\x02\x01\xff\xfe\xfd\xfc\x10\x20\x30\x40\x50\x60\x70\x80"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, exclude := fuzzDocs(data)
		before := deepCopyDocs(docs)
		_ = Validate(docs[0].Groups) // must not panic either

		got := Merge(docs, exclude)
		if !reflect.DeepEqual(docs, before) {
			t.Fatal("Merge modified its input")
		}
		for _, p := range permutations(docs) {
			if again := Merge(p, exclude); !reflect.DeepEqual(again, got) {
				t.Fatalf("order %v gives\n%s\nwant\n%s", ids(p), shape(again), shape(got))
			}
		}
		checkUnion(t, docs, exclude, got)
		if upstreamComparable(docs) {
			theirs := upstreamMerge(docs, exclude)
			if len(theirs) == 0 && len(got) == 0 {
				return // upstream passes a single nil list through
			}
			if !reflect.DeepEqual(got, theirs) {
				t.Fatalf("upstream differs\nours:     %s\nupstream: %s", shape(got), shape(theirs))
			}
		}
	})
}

// upstreamComparable reports whether upstream can be fed the same input:
// distinct server IDs (it keys them in a map) and no name repeated inside one
// document (where Merge deliberately differs, see the package comment).
func upstreamComparable(docs []PeerDocument) bool {
	seen := map[string]bool{}
	for _, d := range docs {
		if seen[d.ServerID] {
			return false
		}
		seen[d.ServerID] = true
		groups := map[string]bool{}
		for _, g := range d.Groups {
			if groups[g.Name] {
				return false
			}
			groups[g.Name] = true
			versions := map[string]bool{}
			for _, v := range g.Versions {
				if versions[v.Version] {
					return false
				}
				versions[v.Version] = true
				resources := map[string]bool{}
				for _, r := range v.Resources {
					if resources[r.Resource] {
						return false
					}
					resources[r.Resource] = true
				}
			}
		}
	}
	return true
}

type gvr struct{ g, v, r string }

func checkUnion(t *testing.T, docs []PeerDocument, exclude func(g, v string) bool, got []apidiscoveryv2.APIGroupDiscovery) {
	t.Helper()
	type want struct {
		verbs   map[string]bool
		subs    map[string]bool
		lists   [][]string // every input verb list, as given
		allNice bool       // every input list sorted and unique
	}
	wantGroups := map[string]bool{}
	wantGVRs := map[gvr]*want{}
	for _, d := range docs {
		for _, g := range d.Groups {
			kept := len(g.Versions) == 0
			for _, v := range g.Versions {
				if exclude != nil && exclude(g.Name, v.Version) {
					continue
				}
				kept = true
				for _, r := range v.Resources {
					k := gvr{g.Name, v.Version, r.Resource}
					w := wantGVRs[k]
					if w == nil {
						w = &want{verbs: map[string]bool{}, subs: map[string]bool{}, allNice: true}
						wantGVRs[k] = w
					}
					for _, verb := range r.Verbs {
						w.verbs[verb] = true
					}
					for _, s := range r.Subresources {
						w.subs[s.Subresource] = true
					}
					w.lists = append(w.lists, r.Verbs)
					w.allNice = w.allNice && sortedUnique(r.Verbs)
				}
			}
			if kept {
				wantGroups[g.Name] = true
			}
		}
	}

	seenGroups := map[string]bool{}
	seenGVRs := map[gvr]bool{}
	for _, g := range got {
		if seenGroups[g.Name] {
			t.Fatalf("group %q twice", g.Name)
		}
		seenGroups[g.Name] = true
		if !wantGroups[g.Name] {
			t.Fatalf("group %q in no input (or excluded)", g.Name)
		}
		seenVersions := map[string]bool{}
		for _, v := range g.Versions {
			if seenVersions[v.Version] {
				t.Fatalf("version %s/%s twice", g.Name, v.Version)
			}
			seenVersions[v.Version] = true
			for _, r := range v.Resources {
				k := gvr{g.Name, v.Version, r.Resource}
				if seenGVRs[k] {
					t.Fatalf("%v twice", k)
				}
				seenGVRs[k] = true
				w := wantGVRs[k]
				if w == nil {
					t.Fatalf("%v in no input (or excluded)", k)
				}
				verbs := map[string]bool{}
				for _, verb := range r.Verbs {
					verbs[verb] = true
				}
				if !reflect.DeepEqual(verbs, w.verbs) {
					t.Fatalf("%v verbs %v, want the union %v", k, r.Verbs, w.verbs)
				}
				subs := map[string]bool{}
				for _, s := range r.Subresources {
					subs[s.Subresource] = true
				}
				if !reflect.DeepEqual(subs, w.subs) {
					t.Fatalf("%v subresources %v, want the union %v", k, subs, w.subs)
				}
				// Upstream sorts verbs only when it merges differing
				// resources; otherwise it keeps one server's list as is.
				if w.allNice && !sortedUnique(r.Verbs) {
					t.Fatalf("%v verbs %v not sorted and unique", k, r.Verbs)
				}
				if !sortedUnique(r.Verbs) && !slices.ContainsFunc(w.lists, func(l []string) bool { return slices.Equal(l, r.Verbs) }) {
					t.Fatalf("%v verbs %v neither sorted nor any input's list", k, r.Verbs)
				}
			}
		}
	}
	for g := range wantGroups {
		if !seenGroups[g] {
			t.Fatalf("group %q missing", g)
		}
	}
	for k := range wantGVRs {
		if !seenGVRs[k] {
			t.Fatalf("%v missing", k)
		}
	}
}

func sortedUnique(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}
