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
	clusters []*localcluster.Cluster
	routings []localcluster.Routing
	plan     Plan
	mode     string
)

// TestMain starts one control plane per routing (PEERDISCOVERY_ROUTING;
// "both": this project's and upstream's, side by side in this one
// invocation). PEERDISCOVERY_DRILL=full runs hack/upgrade-drill.sh's drill
// (about 5 minutes of workload); the default is the short drill the
// end-to-end suite runs.
func TestMain(m *testing.M) {
	plan, mode = ShortPlan(), "short"
	if os.Getenv("PEERDISCOVERY_DRILL") == "full" {
		plan, mode = FullPlan(), "full"
	}
	planetest.MainRoutings(m, planetest.MainConfig{
		Skipped:      "the upgrade drill needs real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 15 * time.Minute,
	}, func(r localcluster.Routing, i int) (localcluster.Config, error) {
		return ClusterConfig(plan, r, 86+i)
	}, func(r []localcluster.Routing, c []*localcluster.Cluster) { routings, clusters = r, c })
}

// TestUpgradeDrill rolls the three servers to the newer release and one
// back under load, then restarts the server the others proxy to, on
// every routing at once with the same plan and seed. On this project's
// routing it requires no false 404, no error left after client-go's
// retries, no lost or duplicated write, informers equal to the final
// list, and deleted namespaces that took their objects with them; on
// upstream's it reports only.
func TestUpgradeDrill(t *testing.T) {
	if clusters == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), plan.MaxDuration+10*time.Minute)
	defer cancel()
	results, errs := planetest.Parallel(len(clusters), func(i int) (*Result, error) {
		return Run(ctx, clusters[i], routings[i], plan, t.Logf)
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", routings[i], err)
		}
	}
	if err := writeResults(results); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade drill (%s):\n%s", mode, Markdown(results...))
	for i, res := range results {
		t.Logf("%s: writes: %s", res.Routing, res.Writes)
		if routings[i] == localcluster.RoutingPeerDiscovery {
			check(t, res)
		}
	}
}

// check holds this project's drill to the bar: Violations, and the
// steps' graceful stops and leave convergence.
func check(t *testing.T, res *Result) {
	for _, v := range Violations(res, plan, 6) {
		t.Error(v)
	}
	for _, st := range res.Steps {
		// A graceful stop takes the shutdown delay and a few seconds; a
		// proxied watch once held it open until the one-minute kill.
		if took := st.Exited - st.SIGTERM; took > plan.ShutdownDelay+20*time.Second {
			t.Errorf("%s: the graceful stop took %s (shutdown delay %s)", st.Step, took.Round(100*time.Millisecond), plan.ShutdownDelay)
		}
	}
	if last := res.Steps[len(res.Steps)-1]; last.Convergence.Leave == nil {
		t.Errorf("%s: no server proxied to it before its SIGTERM: leave convergence not measured", last.Step)
	}
}

// writeResults keeps the runs' results as one JSON document (for
// hack/drill-report) and their Markdown report under the output folder.
func writeResults(results []*Result) error {
	dir := os.Getenv("PEERDISCOVERY_DRILL_DIR")
	if dir == "" {
		dir = filepath.Join(clusters[0].OutputDir(), "upgrade-drill")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.Marshal(results)
	if err != nil {
		return err
	}
	base := filepath.Join(dir, fmt.Sprintf("drill-%s", mode))
	if err := os.WriteFile(base+".json", data, 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".md", []byte(Markdown(results...)), 0o644)
}
