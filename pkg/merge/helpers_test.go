package merge

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Builders for compact test tables.

func grp(name string, versions ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: versions}
}

// grp1 is a group with one version serving one resource.
func grp1(name string) apidiscoveryv2.APIGroupDiscovery {
	return grp(name, ver("v1", res("things", "get", "list")))
}

func ver(name string, resources ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{Version: name, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
}

func res(name string, verbs ...string) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{
		Resource:         name,
		SingularResource: strings.TrimSuffix(name, "s"),
		Scope:            apidiscoveryv2.ScopeNamespace,
		Verbs:            verbs,
	}
}

func withSubs(r apidiscoveryv2.APIResourceDiscovery, subs ...apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	r.Subresources = subs
	return r
}

func sub(name string, verbs ...string) apidiscoveryv2.APISubresourceDiscovery {
	return apidiscoveryv2.APISubresourceDiscovery{Subresource: name, Verbs: verbs}
}

func doc(id string, groups ...apidiscoveryv2.APIGroupDiscovery) PeerDocument {
	return PeerDocument{ServerID: id, Groups: groups}
}

// shape renders groups as "g/v:r[verbs](subs) ..." for readable diffs.
func shape(groups []apidiscoveryv2.APIGroupDiscovery) string {
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%s{", g.Name)
		for _, v := range g.Versions {
			fmt.Fprintf(&b, "%s[", v.Version)
			for _, r := range v.Resources {
				fmt.Fprintf(&b, "%s%v", r.Resource, r.Verbs)
				for _, s := range r.Subresources {
					fmt.Fprintf(&b, "/%s%v", s.Subresource, s.Verbs)
				}
				b.WriteString(" ")
			}
			b.WriteString("] ")
		}
		b.WriteString("} ")
	}
	return b.String()
}

func deepCopyDocs(docs []PeerDocument) []PeerDocument {
	out := make([]PeerDocument, len(docs))
	for i, d := range docs {
		out[i].ServerID = d.ServerID
		if d.Groups != nil {
			out[i].Groups = make([]apidiscoveryv2.APIGroupDiscovery, len(d.Groups))
			for j := range d.Groups {
				d.Groups[j].DeepCopyInto(&out[i].Groups[j])
			}
		}
	}
	return out
}

// filterForUpstream applies exclude to one document the way Merge does,
// so upstream can be fed what its GVExclusionManager would hand it.
func filterForUpstream(groups []apidiscoveryv2.APIGroupDiscovery, exclude func(g, v string) bool) []apidiscoveryv2.APIGroupDiscovery {
	if exclude == nil {
		return groups
	}
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(groups))
	for _, g := range groups {
		if len(g.Versions) == 0 {
			out = append(out, g)
			continue
		}
		var vs []apidiscoveryv2.APIVersionDiscovery
		for _, v := range g.Versions {
			if !exclude(g.Name, v.Version) {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			continue
		}
		if len(vs) != len(g.Versions) {
			g.Versions = vs
		}
		out = append(out, g)
	}
	return out
}

// realisticDocs generates n servers' documents with about gvrs
// group-version-resources each: ~60 groups, 1-3 versions, verbs like a real
// apiserver's, status/scale subresources, mostly identical across servers with
// rolling-upgrade skew (groups and versions only some servers have, a verb or
// subresource more on one server, a few reordered versions).
func realisticDocs(seed uint64, n, gvrs int) []PeerDocument {
	rng := rand.New(rand.NewPCG(seed, 42))
	const groups = 60
	perGroup := gvrs / groups
	allVerbs := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

	base := make([]apidiscoveryv2.APIGroupDiscovery, 0, groups)
	for gi := 0; gi < groups; gi++ {
		name := fmt.Sprintf("group%02d.example.k8s.io", gi)
		if gi == 0 {
			name = "apps"
		}
		nv := 1 + rng.IntN(3)
		versions := []string{"v1", "v1beta1", "v1alpha1"}[:nv]
		g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
		left := perGroup
		for vi, vname := range versions {
			cnt := left / (nv - vi)
			left -= cnt
			v := apidiscoveryv2.APIVersionDiscovery{Version: vname, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			for ri := 0; ri < cnt; ri++ {
				rname := fmt.Sprintf("widget%03ds", ri)
				r := apidiscoveryv2.APIResourceDiscovery{
					Resource:         rname,
					SingularResource: strings.TrimSuffix(rname, "s"),
					Scope:            apidiscoveryv2.ScopeNamespace,
					ResponseKind:     &metav1.GroupVersionKind{Group: name, Version: vname, Kind: fmt.Sprintf("Widget%03d", ri)},
					Verbs:            slices.Clone(allVerbs),
				}
				if rng.IntN(4) == 0 {
					r.ShortNames = []string{fmt.Sprintf("w%d", ri)}
					r.Categories = []string{"all"}
				}
				if rng.IntN(3) == 0 {
					r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{
						Subresource:  "status",
						ResponseKind: r.ResponseKind,
						Verbs:        []string{"get", "patch", "update"},
					})
				}
				if rng.IntN(8) == 0 {
					r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{
						Subresource:  "scale",
						ResponseKind: &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
						Verbs:        []string{"get", "patch", "update"},
					})
				}
				v.Resources = append(v.Resources, r)
			}
			g.Versions = append(g.Versions, v)
		}
		base = append(base, g)
	}

	docs := make([]PeerDocument, n)
	for s := 0; s < n; s++ {
		var gs []apidiscoveryv2.APIGroupDiscovery
		for gi := range base {
			// Old servers (s==1) miss a few groups; new ones (s==2) add some.
			if s == 1 && gi%29 == 5 {
				continue
			}
			g := *base[gi].DeepCopy()
			if s == 1 && len(g.Versions) > 1 && gi%10 == 0 {
				g.Versions = g.Versions[:len(g.Versions)-1] // alpha not enabled
			}
			if s == 2 && gi%11 == 3 {
				g.Versions = append(g.Versions, apidiscoveryv2.APIVersionDiscovery{
					Version: "v2alpha1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
					Resources: []apidiscoveryv2.APIResourceDiscovery{{
						Resource: "newthings", SingularResource: "newthing", Scope: apidiscoveryv2.ScopeCluster,
						Verbs: []string{"get", "list", "watch"},
					}},
				})
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
			gs = append(gs, apidiscoveryv2.APIGroupDiscovery{
				ObjectMeta: metav1.ObjectMeta{Name: "brandnew.k8s.io"},
				Versions: []apidiscoveryv2.APIVersionDiscovery{{
					Version: "v1alpha1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
					Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "gadgets", Scope: apidiscoveryv2.ScopeCluster, Verbs: []string{"get", "list"}}},
				}},
			})
		}
		docs[s] = PeerDocument{ServerID: fmt.Sprintf("kube-apiserver-%c", 'a'+s), Groups: gs}
	}
	return docs
}
