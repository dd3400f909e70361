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

// Package discoverydocs generates realistic /apis documents of several
// kube-apiservers in a rolling upgrade, for the merge and compute tests and
// benchmarks.
package discoverydocs

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Server is one server's generated /apis document.
type Server struct {
	ID     string // kube-apiserver-a, -b, ...
	Groups []apidiscoveryv2.APIGroupDiscovery
}

// allVerbs are a real resource's verbs.
var allVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// Servers generates n servers' documents with about gvrs
// group-version-resources each over groups API groups
// (group000.example.k8s.io, ...): 1-3 versions a group, verbs like a real
// apiserver's, status and scale subresources. They are mostly identical,
// with rolling-upgrade skew: server 1 (old) misses a few groups, an alpha
// version and some verbs; server 2 (new) has more versions, resources,
// subresources and a brand new group. The same seed gives the same
// documents.
func Servers(seed uint64, n, groups, gvrs int) []Server {
	rng := rand.New(rand.NewPCG(seed, 42))
	perGroup := gvrs / groups

	base := make([]apidiscoveryv2.APIGroupDiscovery, 0, groups)
	for gi := 0; gi < groups; gi++ {
		name := fmt.Sprintf("group%03d.example.k8s.io", gi)
		nv := 1 + rng.IntN(3)
		versions := []string{"v1", "v1beta1", "v1alpha1"}[:nv]
		g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
		left := perGroup
		for vi, vname := range versions {
			cnt := left / (nv - vi)
			left -= cnt
			v := version(vname)
			for ri := 0; ri < cnt; ri++ {
				v.Resources = append(v.Resources, resource(rng, name, vname, ri))
			}
			g.Versions = append(g.Versions, v)
		}
		base = append(base, g)
	}

	servers := make([]Server, n)
	for s := 0; s < n; s++ {
		var gs []apidiscoveryv2.APIGroupDiscovery
		for gi := range base {
			if s == 1 && gi%29 == 5 {
				continue
			}
			g := *base[gi].DeepCopy()
			if s == 1 && len(g.Versions) > 1 && gi%10 == 0 {
				g.Versions = g.Versions[:len(g.Versions)-1] // alpha not enabled
			}
			if s == 2 && gi%11 == 3 {
				v := version("v2alpha1")
				v.Resources = []apidiscoveryv2.APIResourceDiscovery{{
					Resource: "newthings", SingularResource: "newthing", Scope: apidiscoveryv2.ScopeCluster,
					Verbs: []string{"get", "list", "watch"},
				}}
				g.Versions = append(g.Versions, v)
			}
			for vi := range g.Versions {
				v := &g.Versions[vi]
				for ri := range v.Resources {
					r := &v.Resources[ri]
					switch {
					case s == 1 && rng.IntN(40) == 0:
						r.Verbs = slices.DeleteFunc(r.Verbs, func(x string) bool { return x == "deletecollection" })
					case s == 2 && rng.IntN(60) == 0:
						r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "ephemeral", Verbs: []string{"get"}})
					}
				}
				if s == 2 && rng.IntN(30) == 0 {
					v.Resources = append(v.Resources, apidiscoveryv2.APIResourceDiscovery{
						Resource: "extras", SingularResource: "extra", Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"},
					})
				}
			}
			gs = append(gs, g)
		}
		if s == 2 {
			v := version("v1alpha1")
			v.Resources = []apidiscoveryv2.APIResourceDiscovery{{Resource: "gadgets", Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get", "list"}}}
			gs = append(gs, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: "brandnew.k8s.io"}, Versions: []apidiscoveryv2.APIVersionDiscovery{v}})
		}
		servers[s] = Server{ID: fmt.Sprintf("kube-apiserver-%c", 'a'+s), Groups: gs}
	}
	return servers
}

func version(name string) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{Version: name, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
}

// resource is the ri-th namespaced resource of a group version, with short
// names, a status and a scale subresource now and then.
func resource(rng *rand.Rand, group, version string, ri int) apidiscoveryv2.APIResourceDiscovery {
	name := fmt.Sprintf("widget%03ds", ri)
	r := apidiscoveryv2.APIResourceDiscovery{
		Resource:         name,
		SingularResource: strings.TrimSuffix(name, "s"),
		Scope:            apidiscoveryv2.ScopeNamespace,
		ResponseKind:     &metav1.GroupVersionKind{Group: group, Version: version, Kind: fmt.Sprintf("Widget%03d", ri)},
		Verbs:            slices.Clone(allVerbs),
	}
	if rng.IntN(4) == 0 {
		r.ShortNames = []string{fmt.Sprintf("w%d", ri)}
		r.Categories = []string{"all"}
	}
	if rng.IntN(3) == 0 {
		r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource: "status", ResponseKind: r.ResponseKind, Verbs: []string{"get", "patch", "update"},
		})
	}
	if rng.IntN(8) == 0 {
		r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{
			Subresource:  "scale",
			ResponseKind: &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
			Verbs:        []string{"get", "patch", "update"},
		})
	}
	return r
}
