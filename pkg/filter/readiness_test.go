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

package filter

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
)

// A server holds back readiness at start until peerdiscovery lists it
// ready with the discovery it serves, bounded in time, and never fails
// again once passed.
func TestReadyzHoldsUntilPeersCanRoute(t *testing.T) {
	pki := newTestPKI(t)
	f, err := New(Options{
		PeerCAFile: pki.peerCAFile, ProxyClientCertFile: pki.clientCertFile, ProxyClientKeyFile: pki.clientKey,
		PeerAdvertiseIP: "127.0.0.1", PeerAdvertisePort: "6443",
	})
	if err != nil {
		t.Fatal(err)
	}
	f.serverID = "apiserver-me"
	expect := func(err error, want string) {
		t.Helper()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Fatalf("got %v, want %q", err, want)
		}
	}
	routable := func(at time.Time, wantRoutable bool, want string) {
		t.Helper()
		got, err := f.routableByPeers(at)
		expect(err, want)
		if got != wantRoutable {
			t.Fatalf("routable %v, want %v", got, wantRoutable)
		}
	}
	expect(f.ReadyzCheck().Check(nil), "has not started")

	start := time.Now()
	f.setSyncDeadline(timePtr(start.Add(time.Minute)))
	routable(start.Add(time.Second), false, "not synced yet")
	routable(start.Add(unsyncedReadyAfter), false, "") // nothing syncs: no hold past it

	f.views.Local.SetDoc(&views.LocalDoc{APIsETag: `"new"`})
	f.views.Routes.SetSynced(true)
	peers := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.APIServerPeer{}, 0, cache.Indexers{})
	f.views.Routes.SetPeers(peers)
	store := peers.GetStore()
	now := start.Add(time.Second)
	routable(now, false, "lists no APIServerPeer apiserver-me")

	peer := &v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "apiserver-me"},
		Spec:       v1alpha1.APIServerPeerSpec{ServerID: "apiserver-me"},
		Status: v1alpha1.APIServerPeerStatus{DiscoveryETag: `"old"`,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}}},
	}
	if err := store.Add(peer); err != nil {
		t.Fatal(err)
	}
	// The tombstone of the last run (the same identity, the old release).
	routable(now, false, `peerdiscovery has its discovery "old", it serves "new"`)
	peer = peer.DeepCopy()
	peer.Status.DiscoveryETag = `"new"`
	peer.Status.Conditions[0].Status = metav1.ConditionFalse
	_ = store.Update(peer)
	routable(now, false, "is not ready")
	routable(start.Add(time.Minute), false, "") // bounded by SyncGracePeriod
	expect(f.ReadyzCheck().Check(nil), "is not ready")

	peer = peer.DeepCopy()
	peer.Status.Conditions[0].Status = metav1.ConditionTrue
	_ = store.Update(peer)
	routable(now, true, "")
	// Routable: the other servers' watches get a moment to catch up.
	expect(f.ReadyzCheck().Check(nil), "letting their watches catch up")
	f.routableSince.Store(timePtr(time.Now().Add(-routableSettle)))
	expect(f.ReadyzCheck().Check(nil), "")
	// Latched: a later discovery change does not take the server out.
	f.views.Local.SetDoc(&views.LocalDoc{APIsETag: `"with-a-new-crd"`})
	expect(f.ReadyzCheck().Check(nil), "")
}

// A filter that is off never holds readiness.
func TestReadyzFilterOff(t *testing.T) {
	f, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ReadyzCheck().Check(nil); err != nil {
		t.Fatalf("disabled filter: %v", err)
	}
}
