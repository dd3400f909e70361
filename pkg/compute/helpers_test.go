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
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/discoverydocs"
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

// realisticPeers is discoverydocs.Servers over 100 groups as ready peers,
// with a core /api.
func realisticPeers(seed uint64, n, gvrs int) []Peer {
	allVerbs := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	core := docs(grp("", ver("v1", res("pods", allVerbs...), res("configmaps", allVerbs...), clusterRes("namespaces"), clusterRes("nodes"))))
	var peers []Peer
	for _, s := range discoverydocs.Servers(seed, n, 100, gvrs) {
		peers = append(peers, readyPeer(s.ID, core, s.Groups))
	}
	return peers
}
