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
	"fmt"
	"hash/fnv"
	"reflect"
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

// testPeer is a server as a test lists it in a routing table, with its own
// state: readiness and departure are on each server's APIServerPeer, not in
// routing tables, and newTable makes those objects.
type testPeer struct {
	v1alpha1.RoutingPeer
	ready metav1.ConditionStatus
}

func ready(id string) testPeer {
	return testPeer{v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id)}, metav1.ConditionTrue}
}

func notReady(id string) testPeer {
	return testPeer{v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id)}, metav1.ConditionFalse}
}

// left is a tombstoned server; its Ready condition may still be true.
func left(id string) testPeer {
	return testPeer{v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpointOf(id), Left: true}, metav1.ConditionTrue}
}

// stateAnnotation carries a listed server's Ready status on the test's
// table, so a table stays one expression; newTable reads it.
const stateAnnotation = "test.peerdiscovery.k8s.io/ready-"

func withPeers(peers ...testPeer) routeOpt {
	return func(t *v1alpha1.PeerRoutingTable) {
		for _, p := range peers {
			t.Status.Peers = append(t.Status.Peers, p.RoutingPeer)
			metav1.SetMetaDataAnnotation(&t.ObjectMeta, stateAnnotation+p.ServerID, string(p.ready))
		}
	}
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
	return t
}

// newTable is NewTable with the APIServerPeer of every server the tables
// list, in the state the test listed it with. A server has one state: a
// test that lists one two ways panics.
func newTable(tables ...*v1alpha1.PeerRoutingTable) *Table {
	byID := map[string]*v1alpha1.APIServerPeer{}
	var peers []*v1alpha1.APIServerPeer
	for _, t := range tables {
		for _, rp := range t.Status.Peers {
			p := peerObject(rp.ServerID, rp.Endpoint, metav1.ConditionStatus(t.Annotations[stateAnnotation+rp.ServerID]), rp.Left)
			if known := byID[rp.ServerID]; known != nil {
				if !reflect.DeepEqual(known.Status, p.Status) {
					panic(fmt.Sprintf("test lists server %s in two states: %+v and %+v", rp.ServerID, known.Status, p.Status))
				}
				continue
			}
			byID[rp.ServerID] = p
			peers = append(peers, p)
		}
	}
	return NewTable(tables, peers)
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

func reviewIDs(peers []v1alpha1.RouteCandidate) []string {
	var out []string
	for _, p := range peers {
		out = append(out, p.ServerID)
	}
	return out
}

// testNow is the time of the tests' decisions.
var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// decide is Decide on a view of table alone, as server self serving local
// (nil: nothing).
func decide(table *Table, req Request, self string, local Local) Result {
	if local == nil {
		local = localSet{}
	}
	return Decide(&Snapshot{Table: table, Self: self, Local: local}, req, testNow)
}

// review is Review on a view of table alone.
func reviewView(table *Table, spec v1alpha1.RouteReviewSpec, source *v1alpha1.APIServerPeer, now time.Time) (v1alpha1.RouteReviewStatus, error) {
	return Review(&Snapshot{Table: table}, spec, source, now)
}

// record is a live registration Lease of id renewed at renewed, recording
// gvrs.
func record(id string, renewed time.Time, gvrs ...schema.GroupVersionResource) *Record {
	return &Record{ID: id, Endpoint: endpointOf(id), RenewTime: renewed, Expires: renewed.Add(10 * time.Second), Served: NewServed(gvrs)}
}
