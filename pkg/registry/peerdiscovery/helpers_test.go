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

package peerdiscovery

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// testView is the registry as the server assembles it: the stores, the
// Publisher on a fake clock, and the REST storage over both.
type testView struct {
	stores    *Stores
	publisher *Publisher
	storage   map[string]rest.Storage
}

// newTestView is a testView whose stores stop with the test.
func newTestView(t *testing.T) *testView {
	t.Helper()
	stores := NewStores()
	t.Cleanup(stores.Stop)
	p := NewPublisher(stores, clocktesting.NewFakePassiveClock(testNow))
	return &testView{stores: stores, publisher: p, storage: Storage(stores, p)}
}

// testPeer is a registered APIServerPeer, ready or not.
func testPeer(id string, ready bool) v1alpha1.APIServerPeer {
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	synced := metav1.NewTime(testNow)
	return v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec: v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: id + ".example:6443", BinaryVersion: "v1.37.2",
			Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}},
		Status: v1alpha1.APIServerPeerStatus{
			Conditions:   []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, Reason: "Test", LastTransitionTime: synced}},
			LastSyncTime: &synced, ResourceCount: 2,
		},
	}
}

// testRoute is the routing table of one GVR listing the given peers.
func testRoute(group, version, resource string, servedByAll bool, peers ...string) v1alpha1.PeerRoutingTable {
	core := group
	if core == "" {
		core = "core"
	}
	t := v1alpha1.PeerRoutingTable{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%s.%s", resource, version, core)},
		Spec:       v1alpha1.PeerRoutingTableSpec{Group: group, Version: version, Resource: resource},
		Status:     v1alpha1.PeerRoutingTableStatus{ServedByAll: servedByAll, TotalPeers: int32(len(peers))},
	}
	for _, id := range peers {
		t.Status.Peers = append(t.Status.Peers, v1alpha1.RoutingPeer{ServerID: id, Endpoint: id + ".example:6443"})
	}
	return t
}

// testOutput: a and b serve pods; only a (ready) serves deviceclasses;
// b is ready when bReady.
func testOutput(bReady bool) compute.Output {
	return compute.Output{
		Peers: []v1alpha1.APIServerPeer{testPeer("a", true), testPeer("b", bReady)},
		Routes: []v1alpha1.PeerRoutingTable{
			testRoute("", "v1", "pods", true, "a", "b"),
			testRoute("resource.k8s.io", "v1beta2", "deviceclasses", false, "a"),
		},
		Discovery: &v1alpha1.PeerAggregatedDiscovery{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PeerAggregatedDiscoveryName}},
	}
}

func publish(t *testing.T, v *testView, out compute.Output) {
	t.Helper()
	if err := v.publisher.Publish(out); err != nil {
		t.Fatal(err)
	}
}
