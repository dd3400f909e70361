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
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/planetest"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// TestRoutingTableSameAtOneResourceVersion: a routing table read twice at
// one resourceVersion is the same object, though a server it names turned
// not ready in between. Readiness is on the server's APIServerPeer only;
// the stored table has no field that could change without a new
// resourceVersion. (The Ready column of kubectl get is computed when the
// Table is rendered, and shows the change.)
func TestRoutingTableSameAtOneResourceVersion(t *testing.T) {
	ids := readyPlane(t)
	planetest.KeepServersRunning(t, cluster, new2)
	ctx := context.Background()
	// One replica, at its own address: resourceVersions are each replica's.
	cfg := cluster.ExtensionConfig(0)
	c := planetest.Client(t, cfg).PeerdiscoveryV1alpha1()
	name := compute.RouteName(svm)
	peerName := compute.PeerName(ids[new2])
	// Read both before the freeze, so the replica's delegated authorization
	// of these reads is cached: its connection to the cluster may end on
	// the frozen server.
	before, err := c.PeerRoutingTables().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.APIServerPeers().Get(ctx, peerName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	code, _, raw := planetest.Get(t, cfg, "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables/"+name)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", name, code, raw)
	}
	var stored map[string]any
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if status, _ := stored["status"].(map[string]any); status["readyPeers"] != nil || strings.Contains(fmt.Sprint(status["peers"]), "ready:") {
		t.Fatalf("%s stores readiness: %s", name, raw)
	}

	// Not ready, not gone: a frozen server's scrapes time out (2 s) before
	// its Lease lapses (15 s).
	if err := cluster.FreezeAPIServer(new2); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := cluster.ThawAPIServer(new2); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)
	poll.Until(t, 100*time.Millisecond, 15*time.Second, ids[new2]+" not ready on the replica", func() error {
		p, err := c.APIServerPeers().Get(ctx, peerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.LeftTime != nil {
			t.Fatalf("%s left before it was seen not ready: %+v", ids[new2], p.Status)
		}
		if planetest.Ready(p) {
			return fmt.Errorf("still ready")
		}
		return nil
	})
	after, err := c.PeerRoutingTables().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	thaw()
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("%s changed from resourceVersion %s to %s while only %s's readiness did: %+v", name, before.ResourceVersion, after.ResourceVersion, ids[new2], after.Status)
	}
	if !equality.Semantic.DeepEqual(before, after) {
		t.Fatalf("%s read twice at resourceVersion %s differs:\n%+v\n%+v", name, before.ResourceVersion, before, after)
	}
	t.Logf("%s at resourceVersion %s: the same object while %s was ready and not ready", name, before.ResourceVersion, ids[new2])
	waitReadyPeer(t, ids[new2])
}
