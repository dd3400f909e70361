package compute

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func res(name string, verbs ...string) apidiscoveryv2.APIResourceDiscovery {
	if len(verbs) == 0 {
		verbs = []string{"get", "list", "watch"}
	}
	return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: verbs}
}

func clusterRes(name string) apidiscoveryv2.APIResourceDiscovery {
	r := res(name)
	r.Scope = apidiscoveryv2.ScopeCluster
	return r
}

func ver(v string, rs ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{Version: v, Resources: rs, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
}

func grp(name string, vs ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: vs}
}

func docs(gs ...apidiscoveryv2.APIGroupDiscovery) []apidiscoveryv2.APIGroupDiscovery { return gs }

// readyPeer is a peer whose discovery was just read.
func readyPeer(id string, api, apis []apidiscoveryv2.APIGroupDiscovery) Peer {
	return Peer{
		ServerID: id, Endpoint: id + ".example:6443", BinaryVersion: "v1.37.2",
		Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
		Ready:   true, ReadyReason: "DiscoverySynced", ReadyTransition: t0, LastSyncTime: t0,
		HasDocument: true, API: api, APIs: apis, APIETag: `"api-` + id + `"`, APIsETag: `"apis-` + id + `"`,
	}
}

func gvr(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

func routeByName(out Output, name string) *v1alpha1.PeerRoutingTable {
	for i := range out.Routes {
		if out.Routes[i].Name == name {
			return &out.Routes[i]
		}
	}
	return nil
}

func peerByID(out Output, id string) *v1alpha1.APIServerPeer {
	for i := range out.Peers {
		if out.Peers[i].Spec.ServerID == id {
			return &out.Peers[i]
		}
	}
	return nil
}

func routePeerIDs(rt *v1alpha1.PeerRoutingTable) []string {
	var ids []string
	for _, p := range rt.Status.Peers {
		ids = append(ids, p.ServerID)
	}
	return ids
}

// hasGV tells whether a discovery list has group/version.
func hasGV(groups []apidiscoveryv2.APIGroupDiscovery, g, v string) bool {
	for _, gr := range groups {
		if gr.Name != g {
			continue
		}
		for _, vr := range gr.Versions {
			if vr.Version == v {
				return true
			}
		}
	}
	return false
}

// realisticPeers generates n servers' documents with about gvrs GVRs each
// (~100 groups, 1-3 versions, verbs and subresources like a real server),
// mostly identical across servers with rolling-upgrade skew: groups and
// versions only some servers have, a verb or subresource more on one.
func realisticPeers(seed uint64, n, gvrs int) []Peer {
	rng := rand.New(rand.NewPCG(seed, 7))
	const groups = 100
	perGroup := gvrs / groups
	allVerbs := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

	var base []apidiscoveryv2.APIGroupDiscovery
	for gi := 0; gi < groups; gi++ {
		name := fmt.Sprintf("group%03d.example.k8s.io", gi)
		nv := 1 + rng.IntN(3)
		versions := []string{"v1", "v1beta1", "v1alpha1"}[:nv]
		g := grp(name)
		left := perGroup
		for vi, vname := range versions {
			cnt := left / (nv - vi)
			left -= cnt
			v := ver(vname)
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
						Subresource: "status", ResponseKind: r.ResponseKind, Verbs: []string{"get", "patch", "update"},
					})
				}
				v.Resources = append(v.Resources, r)
			}
			g.Versions = append(g.Versions, v)
		}
		base = append(base, g)
	}
	core := docs(grp("", ver("v1", res("pods", allVerbs...), res("configmaps", allVerbs...), clusterRes("namespaces"), clusterRes("nodes"))))

	peers := make([]Peer, n)
	for s := 0; s < n; s++ {
		var gs []apidiscoveryv2.APIGroupDiscovery
		for gi := range base {
			if s == 1 && gi%29 == 5 { // an old server misses a few groups
				continue
			}
			g := *base[gi].DeepCopy()
			if s == 1 && len(g.Versions) > 1 && gi%10 == 0 {
				g.Versions = g.Versions[:len(g.Versions)-1] // alpha not enabled
			}
			if s == 2 && gi%11 == 3 { // a new server adds versions
				g.Versions = append(g.Versions, ver("v2alpha1", clusterRes("newthings")))
			}
			for vi := range g.Versions {
				for ri := range g.Versions[vi].Resources {
					r := &g.Versions[vi].Resources[ri]
					switch {
					case s == 1 && rng.IntN(40) == 0:
						r.Verbs = slices.DeleteFunc(r.Verbs, func(x string) bool { return x == "deletecollection" })
					case s == 2 && rng.IntN(60) == 0:
						r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "ephemeral", Verbs: []string{"get"}})
					}
				}
			}
			gs = append(gs, g)
		}
		if s == 2 {
			gs = append(gs, grp("brandnew.k8s.io", ver("v1alpha1", clusterRes("gadgets"))))
		}
		peers[s] = readyPeer(fmt.Sprintf("kube-apiserver-%c", 'a'+s), core, gs)
	}
	return peers
}
