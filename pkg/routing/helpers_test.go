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

package routing

import (
	"hash/fnv"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

func gvr(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

// routeOpt changes a PeerRoutingTable built by rt.
type routeOpt func(*v1alpha1.PeerRoutingTable)

func servedByAll(t *v1alpha1.PeerRoutingTable) { t.Status.ServedByAll = true }

func clusterWide(source string) routeOpt {
	return func(t *v1alpha1.PeerRoutingTable) {
		t.Status.ClusterWide, t.Status.ClusterWideSource = true, source
	}
}

func withPeers(peers ...v1alpha1.RoutingPeer) routeOpt {
	return func(t *v1alpha1.PeerRoutingTable) { t.Status.Peers = append(t.Status.Peers, peers...) }
}

// rt builds the PeerRoutingTable of one GVR.
func rt(g schema.GroupVersionResource, opts ...routeOpt) *v1alpha1.PeerRoutingTable {
	t := &v1alpha1.PeerRoutingTable{
		ObjectMeta: metav1.ObjectMeta{Name: g.Resource + "." + g.Version + "." + g.Group},
		Spec:       v1alpha1.PeerRoutingTableSpec{Group: g.Group, Version: g.Version, Resource: g.Resource},
	}
	for _, o := range opts {
		o(t)
	}
	for _, p := range t.Status.Peers {
		if p.Ready && !p.Left {
			t.Status.ReadyPeers++
		}
	}
	return t
}

func ready(id string) v1alpha1.RoutingPeer {
	return v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id), Ready: true}
}

func notReady(id string) v1alpha1.RoutingPeer {
	return v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id)}
}

// left is a tombstoned peer; the table may still say it was ready.
func left(id string) v1alpha1.RoutingPeer {
	return v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id), Ready: true, Left: true}
}

func endpointOf(id string) string { return id + ".example:6443" }

// peerObject is an APIServerPeer with a Ready condition of the given
// status ("" for none) that may have left.
func peerObject(id, endpoint string, readyStatus metav1.ConditionStatus, hasLeft bool) *v1alpha1.APIServerPeer {
	p := &v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec:       v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: endpoint},
	}
	if readyStatus != "" {
		p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: readyStatus, Reason: "Test"}}
	}
	if hasLeft {
		t := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
		p.Status.LeftTime = &t
	}
	return p
}

// localSet is a routing.Local over a fixed set; a pointer, so handing it
// to Decide allocates nothing.
type localSet map[schema.GroupVersionResource]bool

func (l localSet) Serves(g schema.GroupVersionResource) bool { return l[g] }

// expectedOrder is the documented candidate order, computed independently
// of orderCandidates: FNV-1a 64 of source, NUL, peer ID ascending, ties by ID.
func expectedOrder(self string, ids []string) []string {
	key := func(id string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(self + "\x00" + id))
		return h.Sum64()
	}
	out := append([]string(nil), ids...)
	sort.Slice(out, func(i, j int) bool {
		if ki, kj := key(out[i]), key(out[j]); ki != kj {
			return ki < kj
		}
		return out[i] < out[j]
	})
	return out
}

func ids(peers []Peer) []string {
	var out []string
	for _, p := range peers {
		out = append(out, p.ID)
	}
	return out
}

func reviewIDs(peers []v1alpha1.RoutingPeer) []string {
	var out []string
	for _, p := range peers {
		out = append(out, p.ServerID)
	}
	return out
}
