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

package bench

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestBench runs the suite (hack/bench.sh): PEERDISCOVERY_BENCH=1, the
// scale in PEERDISCOVERY_BENCH_SCALE (smoke, the default, or full), the
// parts in PEERDISCOVERY_BENCH_PARTS (default list,watch,load,cost), the
// output folder in PEERDISCOVERY_BENCH_DIR (default _output/bench). It
// writes result.json and report.md there, and the heap profiles.
func TestBench(t *testing.T) {
	if os.Getenv("PEERDISCOVERY_BENCH") != "1" {
		t.Skip("the filter's cost at scale runs on demand: hack/bench.sh (PEERDISCOVERY_BENCH=1)")
	}
	scale, err := ScaleNamed(os.Getenv("PEERDISCOVERY_BENCH_SCALE"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(os.Getenv("PEERDISCOVERY_BENCH_PARTS"), ",")
	if os.Getenv("PEERDISCOVERY_BENCH_PARTS") == "" {
		parts = []string{"list", "watch", "load", "cost"}
	}
	dir := os.Getenv("PEERDISCOVERY_BENCH_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "_output", "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	res := &Result{Scale: scale, Started: time.Now(), Commit: commit(), LoadAvg: map[string]string{}, Took: map[string]time.Duration{}, Cores: runtime.NumCPU()}
	keepOtherParts(t, filepath.Join(dir, "result.json"), res, parts)
	ctx := t.Context()
	save := func() {
		data, err := json.MarshalIndent(res, "", " ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "result.json"), data, 0o644)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(res)), 0o644)
		}
		if err != nil {
			t.Error(err)
		}
	}
	defer save()
	part := func(name string, f func()) {
		if !slices.Contains(parts, name) {
			return
		}
		res.LoadAvg[name+" start"] = loadAvg()
		start := time.Now()
		f()
		res.Took[name] = time.Since(start)
		res.LoadAvg[name+" end"] = loadAvg()
		save()
	}

	if slices.ContainsFunc(parts, func(p string) bool { return p == "list" || p == "watch" || p == "load" }) {
		planes, err := StartPlanes(ctx, []string{OldVersion, NewVersion}, nil, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer StopPlanes(planes)
			waitProxying(t, planes)
			paths := Paths(planes)
			part("list", func() {
				if res.List, err = RunList(ctx, planes, paths, scale, dir, t.Logf); err != nil {
					t.Fatal(err)
				}
			})
			part("watch", func() {
				if res.Watch, err = RunWatch(ctx, planes, paths, scale, dir, t.Logf); err != nil {
					t.Fatal(err)
				}
			})
			part("load", func() {
				if res.Load, res.LoadProfiles, err = RunLoad(ctx, planes, paths, scale, dir, t.Logf); err != nil {
					t.Fatal(err)
				}
			})
		}()
	}
	part("cost", func() { res.Cost = runCost(t, scale, dir) })
	t.Logf("\n%s", Markdown(res))
}

// runCost measures the filter's own cost on planes of the scale's
// servers: idle, with the CRDs, then with the rest of the extra GVRs as
// the stub's aggregated APIServices.
func runCost(t *testing.T, s Scale, dir string) *CostResult {
	ctx := t.Context()
	res := &CostResult{Servers: s.CostServers, GVRsWanted: s.CostGVRs, CRDsWanted: s.CostCRDs, Settle: s.CostSettle, SteadyAt: s.CostSteadyAt}
	stub, err := buildStub(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Heap profiles sample every 64 KiB allocated instead of 512 KiB, on
	// both planes: the filter's part is a few MiB.
	planes, err := StartPlanes(ctx, s.CostServers, []string{"GODEBUG=memprofilerate=65536"}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer StopPlanes(planes)
	waitProxying(t, planes)
	measure := func(name string, steady time.Duration) {
		quiet, err := WaitQuiet(ctx, planes, costQuietBound)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range quiet {
			t.Logf("%s: %s quiet after %s (reached: %t)", name, q.Routing, q.After.Round(time.Second), q.Reached)
		}
		quietAt := time.Now()
		time.Sleep(s.CostSettle)
		st, err := MeasureCost(ctx, planes, s, name, res.CRDs, res.StubGVRs, quietAt, steady, dir)
		if err != nil {
			t.Fatal(err)
		}
		st.Quiet = quiet
		res.States = append(res.States, st)
		t.Logf("cost measured: %s", name)
	}
	measure("idle", s.CostWindow)

	start := time.Now()
	res.CRDs, res.CRDsNote, err = CreateCRDs(ctx, planes, s, 20*time.Minute, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitGVRsServed(ctx, planes, crdSuffix, res.CRDs, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	planetest.ReadyPlane(t, planes[0].C, 0)
	res.CRDsTook = time.Since(start)
	t.Logf("%d CRDs served everywhere after %s", res.CRDs, res.CRDsTook.Round(time.Second))
	measure("crds", s.CostWindow)

	res.StubGVRs = (s.CostGVRs - res.CRDs + perGroup - 1) / perGroup * perGroup
	start = time.Now()
	for _, pl := range planes {
		if err := StartStub(ctx, pl, stub, dir, res.StubGVRs); err != nil {
			t.Fatal(err)
		}
	}
	if err := WaitGVRsServed(ctx, planes, stubSuffix, res.StubGVRs, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	planetest.ReadyPlane(t, planes[0].C, 0)
	res.StubTook = time.Since(start)
	t.Logf("%d aggregated resources served everywhere after %s", res.StubGVRs, res.StubTook.Round(time.Second))
	measure("gvrs", s.CostGoalWindow)
	return res
}

// waitProxying waits until this project's plane is whole (the filters
// synced, a routing table for every resource) and the v1.37-only
// resource answers through the v1.36.3 server of every plane.
func waitProxying(t *testing.T, planes []*Plane) {
	t.Helper()
	for _, pl := range planes {
		if len(pl.C.Extensions()) > 0 {
			planetest.ReadyPlane(t, pl.C, 0)
		}
		for i, srv := range pl.C.Servers() {
			if srv.Version != OldVersion {
				continue
			}
			planetest.WaitFor(t, 3*time.Minute, pl.Routing.String()+" proxying from "+srv.Name, func() error {
				code, _, body := planetest.Get(t, pl.C.AdminConfig(i), svmPath+"?limit=1")
				if code != http.StatusOK {
					return &statusError{code, string(body)}
				}
				return nil
			})
		}
	}
}

// keepOtherParts fills res with the parts of an earlier run at the same
// scale in path that this run does not measure, so a suite split over
// two runs (hack/bench.sh --parts) still gives one report.
func keepOtherParts(t *testing.T, path string, res *Result, parts []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var prev Result
	if err := json.Unmarshal(data, &prev); err != nil || prev.Scale.Name != res.Scale.Name {
		return
	}
	kept := false
	for _, p := range []string{"list", "watch", "load", "cost"} {
		if slices.Contains(parts, p) {
			continue
		}
		switch p {
		case "list":
			res.List, kept = prev.List, kept || prev.List != nil
		case "watch":
			res.Watch, kept = prev.Watch, kept || prev.Watch != nil
		case "load":
			res.Load, res.LoadProfiles, kept = prev.Load, prev.LoadProfiles, kept || prev.Load != nil
		case "cost":
			res.Cost, kept = prev.Cost, kept || prev.Cost != nil
		}
		for _, k := range []string{p + " start", p + " end"} {
			if v, ok := prev.LoadAvg[k]; ok {
				res.LoadAvg[k] = v
			}
		}
		if v, ok := prev.Took[p]; ok {
			res.Took[p] = v
		}
	}
	if kept {
		res.Commit += " (some parts from the run of " + prev.Started.UTC().Format(time.RFC3339) + ", " + prev.Commit + ")"
	}
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return http.StatusText(e.code) + ": " + truncate([]byte(e.body), 200)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
