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

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// CISeed and CIDuration are the test command's soak. The seed was
// chosen for its three episodes (hack/chaos.sh --plan --seed 4923): every
// extension replica crashed while two servers, one of them the only
// server of the newer APIs, freeze; that server crashed for 47 s while
// every replica restarts (the replicas come back with no memory of it,
// well before it does); a partition between it and kube-apiserver-1 while
// every replica crashes again.
const (
	CISeed     = 4923
	CIDuration = 150 * time.Second
)

// CIClientBounds are the limits of the CI soak's client figures, where
// ours runs alone, from hack/chaos.sh --seed 4923 --routing both on the
// 2-core machine (no race detector: the test command runs this package
// without it too). Upstream's side, four runs (2026-12-05 and -06): p99
// time to success 57.8 ms to 2,016 ms, failed after retries 728–839,
// skipped 967–1,171. Ours: failed 650–837 (six runs), skipped 802–1,424
// (eight); beside upstream's it failed more once (837 against 827) and
// skipped more than 1.2 × once (1,424). So CI holds ours to upstream's
// highest figure plus that spread: p99 to MinLatencyBar (upstream's was
// under it in three of four runs), failed to 1,000 (1.2 × 839), skipped
// to 1,750 (1.5 × 1,171). A server answering 503 where a peer could serve fails all three
// and the floor; the 30-minute both-routing soaks hold the exact bars.
// The p99 sits near an edge: about 1 % of the operations take over 1 s
// in every run (clients of a frozen server, waits through a partition).
// On 2026-12-06 ours went over it in two runs of five (2,069 and 2,009
// ms; upstream 2,007 ms beside the second): 7 to 10 of each run's slow
// operations were the servers' first Widget writes, 2 s each on either
// routing, which workload.SetUp now makes before the operations start.
// The two runs after that: ours 241 and 101 ms, upstream's 186 and 161.
var CIClientBounds = &ClientBounds{Seed: CISeed, P99ToSuccess: 60 * time.Millisecond, Failed: 1000, Skipped: 1750}

var (
	clusters []*localcluster.Cluster
	routings []localcluster.Routing
)

// TestMain starts one plane per routing (PEERDISCOVERY_ROUTING; "both":
// this project's and upstream's built-in proxy, side by side).
func TestMain(m *testing.M) {
	planetest.MainRoutings(m, planetest.MainConfig{
		Skipped:      "the chaos soak needs real binaries, network namespaces, iptables and cgroups: set PEERDISCOVERY_E2E=1 (hack/test.sh, hack/chaos.sh do)",
		StartTimeout: 15 * time.Minute,
	}, func(r localcluster.Routing, i int) (localcluster.Config, error) {
		return ClusterConfig(r, 95+i) // 10.254.95 and .96: no other package uses them
	}, func(r []localcluster.Routing, c []*localcluster.Cluster) { routings, clusters = r, c })
}

// soakConfig reads PEERDISCOVERY_CHAOS_SEED and PEERDISCOVERY_CHAOS_DURATION
// (defaults: CISeed, CIDuration).
func soakConfig(t *testing.T) Config {
	cfg := Config{Seed: CISeed, Duration: CIDuration, Rate: 40, Workers: 32}
	if v := os.Getenv("PEERDISCOVERY_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PEERDISCOVERY_CHAOS_SEED=%q: %v", v, err)
		}
		cfg.Seed = seed
	}
	if v := os.Getenv("PEERDISCOVERY_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > 2*time.Hour {
			t.Fatalf("PEERDISCOVERY_CHAOS_DURATION=%q: want a duration from 1m to 2h", v)
		}
		cfg.Duration = d
	}
	return cfg
}

// TestChaos runs the seed's episodes on every routing at once and checks
// the invariants; on this project's routing every violation fails the
// test, upstream's are reported.
func TestChaos(t *testing.T) {
	if clusters == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
	cfg := soakConfig(t)
	episodes := Episodes(NewSchedule(cfg.Seed, Shape{Servers: len(Versions), Replicas: 2}), cfg.Duration, episodeOverhead)
	t.Logf("chaos soak: seed %d, %s, %d episodes on %v", cfg.Seed, cfg.Duration, len(episodes), routings)
	for i, ep := range episodes {
		t.Logf("  episode %d: %s", i+1, ep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.Duration+30*time.Minute)
	defer cancel()
	b := NewBarrier(len(clusters))
	results, errs := planetest.Parallel(len(clusters), func(i int) (*Result, error) {
		return Run(ctx, clusters[i], routings[i], cfg, episodes, b, t.Logf)
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", routings[i], err)
		}
	}
	// The client figures, ours against upstream's when it ran beside,
	// else against upstream's measured bound for the CI seed.
	var upstream *Result
	for i, r := range results {
		if routings[i] == localcluster.RoutingUpstream {
			upstream = r
		}
	}
	for i, r := range results {
		if routings[i] == localcluster.RoutingPeerDiscovery {
			r.Violations = append(r.Violations, CheckClients(r, upstream, CIClientBounds, cfg.Rate)...)
		}
	}
	dir, err := writeResults(cfg, results)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos soak report: %s\n%s", dir, Markdown(results...))
	for i, r := range results {
		if routings[i] != localcluster.RoutingPeerDiscovery {
			continue
		}
		for inv, n := range r.ByInvariant() {
			t.Errorf("%s: %d violations of %q (seed %d; timelines above and in %s)", r.Routing, n, inv, r.Seed, dir)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		_ = clusters[i].WaitControllerManager(wctx) // it may be between two restarts
		wcancel()
		if err := clusters[i].Health(); err != nil {
			t.Errorf("%s: components down after the soak: %v", r.Routing, err)
		}
	}
}

// writeResults writes results.json (every routing's Result, for
// hack/drill-report) and report.md under PEERDISCOVERY_CHAOS_DIR, else
// <output>/chaos/seed-<seed>.
func writeResults(cfg Config, results []*Result) (string, error) {
	dir := os.Getenv("PEERDISCOVERY_CHAOS_DIR")
	if dir == "" {
		dir = filepath.Join(clusters[0].OutputDir(), "chaos", fmt.Sprintf("seed-%d", cfg.Seed))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.Marshal(results)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(results...)), 0o644)
}
