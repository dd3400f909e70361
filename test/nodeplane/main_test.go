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

package nodeplane

import (
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
	"sigs.k8s.io/peerdiscovery/test/upgradedrill"
)

const (
	from = "v1.36.3"
	to   = "v1.37.2"
	// subnetOctet keeps this plane (10.254.85.0/24) apart from the other
	// packages' when they run side by side (hack/test.sh's lanes; the
	// chaos soak's is 88).
	subnetOctet = 85
)

var (
	cluster *localcluster.Cluster
	plan    upgradedrill.Plan
	steps   []upgradedrill.Step
	mode    string
	// planeStart is when TestMain began to start the plane.
	planeStart time.Time
)

func TestMain(m *testing.M) {
	planeStart = time.Now()
	plan, mode = upgradedrill.ShortPlan(), "short"
	steps = []upgradedrill.Step{{Server: 0, Version: to}}
	if os.Getenv("PEERDISCOVERY_NODES") == "full" {
		plan, mode = upgradedrill.FullPlan(), "full"
		steps = []upgradedrill.Step{{Server: 0, Version: to}, {Server: 1, Version: to}, {Server: 2, Version: to}}
	}
	// A static pod's swap and the extension's rollout take longer than a
	// process restart: room for them within the workload's bound.
	plan.MaxDuration += 3 * time.Minute
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "the node-based plane runs on demand, not in hack/test.sh (docs/testing.md): it needs real binaries, containerd and network namespaces: PEERDISCOVERY_E2E=1 go test -count=1 -race ./test/nodeplane",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			cfg := localcluster.Config{SubnetOctet: subnetOctet}
			for range 3 {
				cfg.Servers = append(cfg.Servers, localcluster.ServerSpec{Version: from, ExtraFlags: []string{
					"--shutdown-delay-duration=" + plan.ShutdownDelay.String(),
				}})
			}
			cfg.Nodes = localcluster.NodesSpec{Enabled: true, UpgradeVersions: []string{to}}
			return cfg, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}
