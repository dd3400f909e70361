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

// Package e2e135 runs an upgrade from v1.35 on a real local control plane
// (internal/localcluster): kube-apiserver v1.35.4, v1.36.3 and v1.37.2, each
// with the filter linked in (the v1.35 build compiles it against the v0.35
// libraries), and two peerdiscovery-apiserver replicas behind the
// APIService. Upstream's built-in proxy is alpha and off in v1.35; this is
// what makes the v1.36 APIs work through a v1.35 server.
package e2e135

import (
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The servers, by index.
const (
	v135 = 0
	v136 = 1
	v137 = 2
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "the upgrade from v1.35.4 runs on demand, not in hack/test.sh: hack/build-kube-apiserver.sh v1.35.4 && PEERDISCOVERY_E2E=1 go test -count=1 -race ./test/e2e135 (docs/testing.md)",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			return localcluster.Config{
				Servers: []localcluster.ServerSpec{
					// apps/v1 and policy/v1 off: Deployments, DaemonSets,
					// PodDisruptionBudgets... reach this server's clients
					// from peers, through every discovery form
					// (TestLegacyDiscoveryAndOpenAPI).
					{Version: "v1.35.4", ExtraFlags: []string{"--runtime-config=apps/v1=false,policy/v1=false"}},
					{Version: "v1.36.3"},
					{Version: "v1.37.2"},
				},
				// The skew under test is in the servers; a controller
				// manager would need a third build (v1.35.4) for nothing
				// here.
				ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
				TombstonePeriod:   time.Minute,
				SubnetOctet:       82,
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

// readyPlane is planetest.ReadyPlane on the package's control plane: it
// skips without one, else waits until it is whole and returns the peers'
// identities by server index.
func readyPlane(t *testing.T) map[int]string {
	t.Helper()
	return planetest.ReadyPlane(t, cluster, v137)
}
