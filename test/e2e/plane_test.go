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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// Each test starts with readyPlane and restores what it stops
// (planetest.KeepServersRunning, planetest.KeepExtensionsRunning), so that
// it runs alone and in any order on the package's one control plane.

// readyPlane is planetest.ReadyPlane on the package's control plane: it
// skips without one, else waits until it is whole and returns the peers'
// identities by server index.
func readyPlane(t *testing.T) map[int]string {
	t.Helper()
	return planetest.ReadyPlane(t, cluster, new1)
}

// waitReadyPeer waits until the peer with identity id is ready.
func waitReadyPeer(t *testing.T, id string) {
	t.Helper()
	planetest.WaitFor(t, 2*time.Minute, "peer "+id+" ready", func() error {
		peers, err := pd(t, new1).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range peers.Items {
			if p.Spec.ServerID == id && planetest.Ready(&p) {
				return nil
			}
		}
		return fmt.Errorf("not ready")
	})
}

// restartExtension stops replica i and starts it again.
func restartExtension(t *testing.T, i int) {
	t.Helper()
	if err := cluster.StopExtension(i); err != nil {
		t.Fatal(err)
	}
	startExtensions(t, i)
}

// startExtensions starts the replicas and waits for the APIService.
func startExtensions(t *testing.T, replicas ...int) {
	t.Helper()
	for _, i := range replicas {
		if err := cluster.StartExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.WaitExtensionAvailable(ctx); err != nil {
		t.Fatal(err)
	}
}

// allExtensions lists every replica's index.
func allExtensions() []int {
	var out []int
	for i := range cluster.Extensions() {
		out = append(out, i)
	}
	return out
}
