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

package upgradedrill

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

var (
	cluster *localcluster.Cluster
	routing localcluster.Routing
	plan    Plan
	mode    string
)

// TestMain starts the drill's control plane. PEERDISCOVERY_DRILL=full runs
// hack/upgrade-drill.sh's drill (about 4 minutes of workload); the default
// is the short drill the end-to-end suite runs.
func TestMain(m *testing.M) {
	plan, mode = ShortPlan(), "short"
	if os.Getenv("PEERDISCOVERY_DRILL") == "full" {
		plan, mode = FullPlan(), "full"
	}
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "the upgrade drill needs real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 15 * time.Minute,
		Plane: func(r localcluster.Routing) (localcluster.Config, error) {
			routing = r
			return ClusterConfig(plan, routing, 86)
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

// TestUpgradeDrill rolls the three servers to the newer release and one
// back under load. On this project's routing it requires no false 404,
// no lost or duplicated write, and informers equal to the final list; on
// upstream's it reports only.
func TestUpgradeDrill(t *testing.T) {
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), plan.MaxDuration+5*time.Minute)
	defer cancel()
	res, err := Run(ctx, cluster, routing, plan, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeResult(res); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade drill (%s, %s):\n%s", routing, mode, Markdown(res))
	_, total := Summarize(res)
	t.Logf("writes: %s", res.Writes)
	if routing != localcluster.RoutingPeerDiscovery {
		return
	}
	if total.Ops < plan.Rate*int(plan.Warmup.Seconds()) {
		t.Errorf("only %d operations: the workload did not run", total.Ops)
	}
	if total.FalseNotFound != 0 {
		t.Errorf("%d false 404s", total.FalseNotFound)
		for _, s := range res.Samples {
			if s.Code == 404 {
				t.Logf("  at %s on kube-apiserver-%d: %s %s: %s", secs(s.At), s.Server, s.Verb, s.Kind, s.Err)
			}
		}
	}
	for _, st := range res.Steps {
		// A graceful stop takes the shutdown delay and a few seconds; a
		// proxied watch once held it open until the one-minute kill.
		if took := st.Exited - st.SIGTERM; took > plan.ShutdownDelay+20*time.Second {
			t.Errorf("%s: the graceful stop took %s (shutdown delay %s)", st.Step, took.Round(100*time.Millisecond), plan.ShutdownDelay)
		}
	}
	if !res.Writes.OK() {
		t.Errorf("writes: %s", res.Writes)
	}
	if e, n := res.InformersEqual(); e != n || n != 6 {
		t.Errorf("informers equal to the final quorum list: %d of %d (want 6 of 6): %+v", e, n, res.Informers)
	}
	if total.Failed != 0 {
		// Reported, not required: the goal beyond the bar.
		t.Logf("%d operations failed after client-go's retries", total.Failed)
		for _, s := range res.Samples {
			if s.Code != 200 {
				t.Logf("  at %s on kube-apiserver-%d: %s %s: %d %s", secs(s.At), s.Server, s.Verb, s.Kind, s.Code, s.Err)
			}
		}
	}
}

// writeResult keeps the run's result as JSON (for hack/drill-report) and
// its Markdown report under the output folder.
func writeResult(res *Result) error {
	dir := os.Getenv("PEERDISCOVERY_DRILL_DIR")
	if dir == "" {
		dir = filepath.Join(cluster.OutputDir(), "upgrade-drill")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%s", res.Routing, mode))
	if err := os.WriteFile(base+".json", data, 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".md", []byte(Markdown(res)), 0o644)
}
