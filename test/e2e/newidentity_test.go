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

package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestNewIdentitySameEndpoint: a kube-apiserver that comes back under a
// new identity at the same endpoint replaces the old one at once: counted
// once, and no route names the old identity.
func TestNewIdentitySameEndpoint(t *testing.T) {
	ids := readyPlane(t)
	ctx := context.Background()
	oldID := ids[new2]
	t.Cleanup(func() {
		// Later tests expect the original identity.
		if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		if err := cluster.StartAPIServerAs(new2, cluster.Servers()[new2].Name); err != nil {
			t.Error(err)
		}
		waitReadyPeer(t, oldID)
	})
	if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServerAs(new2, "kube-apiserver-2-renamed"); err != nil {
		t.Fatal(err)
	}
	var newID string
	planetest.WaitFor(t, time.Minute, "the new identity ready", func() error {
		now, err := planetest.ServerIDs(ctx, cluster, old)
		if err != nil {
			return err
		}
		if now[new2] == "" || now[new2] == oldID {
			return fmt.Errorf("server %d known as %q", new2, now[new2])
		}
		newID = now[new2]
		return nil
	})
	// Within one refresh interval of the new identity being ready (the
	// refresh is 2s here; allow a few), the old identity is gone everywhere.
	planetest.WaitFor(t, 10*time.Second, "the old identity retired", func() error {
		peers, err := pd(t, old).PeerdiscoveryV1alpha1().APIServerPeers().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range peers.Items {
			if p.Spec.ServerID == oldID {
				return fmt.Errorf("APIServerPeer %s still listed", p.Name)
			}
		}
		routes, err := pd(t, old).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, r := range routes.Items {
			if r.Status.TotalPeers > int32(len(cluster.Servers())) {
				return fmt.Errorf("%s counts %d peers for %d servers", r.Name, r.Status.TotalPeers, len(cluster.Servers()))
			}
			for _, p := range r.Status.Peers {
				if p.ServerID == oldID {
					return fmt.Errorf("%s still names %s", r.Name, oldID)
				}
			}
		}
		return nil
	})
	prt, err := pd(t, old).PeerdiscoveryV1alpha1().PeerRoutingTables().Get(ctx, compute.RouteName(svm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Readiness is on the APIServerPeers, not in the routing table.
	peers, err := pd(t, old).PeerdiscoveryV1alpha1().APIServerPeers().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	isReady := map[string]bool{}
	for i := range peers.Items {
		isReady[peers.Items[i].Spec.ServerID] = planetest.Ready(&peers.Items[i])
	}
	ready := 0
	for _, p := range prt.Status.Peers {
		if isReady[p.ServerID] {
			ready++
		}
	}
	if prt.Status.TotalPeers != int32(len(cluster.Servers())) || ready != 2 {
		t.Fatalf("%s after the rename: %d ready of %d total, want 2 of %d", prt.Name, ready, prt.Status.TotalPeers, len(cluster.Servers()))
	}
	t.Logf("%s replaced by %s at the same endpoint", oldID, newID)
}
