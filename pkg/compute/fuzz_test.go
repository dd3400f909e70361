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
	"reflect"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

type bytes struct {
	data []byte
	i    int
}

func (b *bytes) next() byte {
	if b.i >= len(b.data) {
		return 0
	}
	c := b.data[b.i]
	b.i++
	return c
}

func (b *bytes) intn(n int) int { return int(b.next()) % n }

// str picks from the pool or, now and then, makes a raw string from the
// input itself (printable or not).
func (b *bytes) str(pool []string) string {
	k := b.intn(len(pool) + 1)
	if k < len(pool) {
		return pool[k]
	}
	n := b.intn(12)
	out := make([]byte, n)
	for i := range out {
		out[i] = b.next()
	}
	return string(out)
}

var (
	fuzzGroups = []string{"", "apps", "core", "batch", "stable.example.com", "v1.g", "g", "a-b.io", "x",
		strings.Repeat("l", 63) + "." + strings.Repeat("m", 63) + "." + strings.Repeat("n", 63) + "." + strings.Repeat("o", 61)}
	fuzzVersions  = []string{"v1", "v1beta1", "v2alpha1", "b", "v1", "x-y", "V1", "1v"}
	fuzzResources = []string{"pods", "deployments", "a.b", "a", "Pods", "under_score", "-x", "x-", "~tilde", "a..b", "b", "status",
		"pods/log", ".", "..", strings.Repeat("r", 200)}
	fuzzIDs = []string{"kube-apiserver-a", "kube-apiserver-b", "10.0.0.1:6443", "[fd00::1]:6443", "[::ffff:a00:1]:6443", "apiserver-xyz", "Upper_Case"}
)

func (b *bytes) groups() []apidiscoveryv2.APIGroupDiscovery {
	var out []apidiscoveryv2.APIGroupDiscovery
	for g := b.intn(4); g > 0; g-- {
		gr := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: b.str(fuzzGroups)}}
		for v := b.intn(3); v > 0; v-- {
			vr := apidiscoveryv2.APIVersionDiscovery{Version: b.str(fuzzVersions)}
			for r := b.intn(4); r > 0; r-- {
				scope := apidiscoveryv2.ScopeNamespace
				if b.intn(2) == 0 {
					scope = apidiscoveryv2.ScopeCluster
				}
				vr.Resources = append(vr.Resources, apidiscoveryv2.APIResourceDiscovery{
					Resource: b.str(fuzzResources), Scope: scope, Verbs: []string{"get", "list"}[:b.intn(3)],
				})
			}
			gr.Versions = append(gr.Versions, vr)
		}
		out = append(out, gr)
	}
	return out
}

// FuzzValidateAndCompute feeds random peer documents through merge.Validate,
// as the engine does, and the valid ones through Compute.
func FuzzValidateAndCompute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x03\x00\x01\x01\x01\x01\x02\x00\x01\x03\x02\x02\x02\x01\x01\x01\x04\x05\x00\x02\x02\x00\x03\x01\x01"))
	f.Add([]byte("two peers share apps/v1 deployments, one lists a.b in group v1.g and core pods"))
	f.Add([]byte{2, 1, 1, 2, 1, 1, 1, 3, 1, 2, 1, 5, 7, 1, 9, 0, 3, 1, 4, 1, 1, 2, 10, 3, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &bytes{data: data}
		var peers []Peer
		used := map[string]bool{}
		for n := 1 + b.intn(4); n > 0; n-- {
			id := b.str(fuzzIDs)
			if used[id] {
				continue // the engine keys peers by ID
			}
			used[id] = true
			p := Peer{ServerID: id, Endpoint: "10.0.0.1:6443", Ready: b.intn(2) == 0, Left: b.intn(4) == 0, API: b.groups(), APIs: b.groups()}
			p.HasDocument = merge.Validate(p.API) == nil && merge.Validate(p.APIs) == nil
			peers = append(peers, p)
		}
		clusterWide := map[schema.GroupVersion]string{{Group: b.str(fuzzGroups), Version: b.str(fuzzVersions)}: SourceCRD}
		exG, exV := b.str(fuzzGroups), b.str(fuzzVersions)
		excluded := func(g, v string) bool { return g == exG && v == exV }

		out, err := Compute(Input{Peers: peers, ClusterWide: clusterWide, Excluded: excluded})
		if err != nil {
			t.Fatalf("Compute: %v", err)
		}

		names := map[string]schema.GroupVersionResource{}
		for _, r := range out.Routes {
			g := schema.GroupVersionResource{Group: r.Spec.Group, Version: r.Spec.Version, Resource: r.Spec.Resource}
			if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
				t.Errorf("route %q for %v: %v", r.Name, g, errs)
			}
			if prev, dup := names[r.Name]; dup {
				t.Errorf("route name %q for both %v and %v", r.Name, prev, g)
			}
			names[r.Name] = g
			if excluded(g.Group, g.Version) {
				t.Errorf("excluded %v routed", g)
			}
			ids := routePeerIDs(&r)
			if len(ids) == 0 || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Errorf("route %s peers %v: want sorted, unique, non-empty", r.Name, ids)
			}
		}
		peerNames := map[string]bool{}
		for _, p := range out.Peers {
			if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
				t.Errorf("peer %q (%q): %v", p.Name, p.Spec.ServerID, errs)
			}
			if peerNames[p.Name] {
				t.Errorf("peer name %q twice", p.Name)
			}
			peerNames[p.Name] = true
		}
		// Every GVR of a valid document has its route, with that peer.
		for _, p := range peers {
			if !p.HasDocument {
				continue
			}
			for listed := range merge.Resources(p.API, p.APIs) {
				if excluded(listed.Group, listed.Version) {
					continue
				}
				rt := routeByName(out, RouteName(listed))
				if rt == nil || !slices.Contains(routePeerIDs(rt), p.ServerID) {
					t.Errorf("%s/%s/%s of %s has no route naming it", listed.Group, listed.Version, listed.Resource, p.ServerID)
				}
			}
		}
		// Input order does not matter.
		rev := slices.Clone(peers)
		slices.Reverse(rev)
		again, err := Compute(Input{Peers: rev, ClusterWide: clusterWide, Excluded: excluded})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, again) {
			t.Errorf("reversed input gives a different output")
		}
	})
}
