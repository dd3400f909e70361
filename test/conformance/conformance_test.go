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

package conformance

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// newerReleaseOnly are the conformance tests (name fragments) of the APIs
// that only v1.37.2 serves, found by diffing the two releases' discovery
// and conformance.yaml: through v1.36.3 they reach their API only through
// the filter.
var newerReleaseOnly = []string{
	"StorageVersionMigration CRUD Tests storagemigration.k8s.io/v1 StorageVersionMigration",
	"PodCertificateRequest API [Privileged:ClusterAdmin] should support PodCertificateRequest API operations",
	"CRUD Tests certificates.k8s.io/v1 ClusterTrustBundles",
	"[DRA] CRUD Tests resource.k8s.io/v1 DeviceTaintRule",
}

// suiteTimeout bounds one server's run of the selection.
const suiteTimeout = 40 * time.Minute

// fullEverywhere is PEERDISCOVERY_CONFORMANCE=full: the whole selection
// through every server. By default (CI) the whole selection runs through
// the oldest server, where the filter routes, and the focus-every rules
// (the newer release's APIs, discovery) through every other server: two
// full runs cost 7.5 more minutes than CI has (docs/harness.md,
// "Upstream's conformance tests as the judge").
var fullEverywhere = os.Getenv("PEERDISCOVERY_CONFORMANCE") == "full"

// TestUpstreamConformanceThroughEveryServer runs the selection through
// each kube-apiserver and compares the outcomes test by test. With
// peerdiscovery every selected test passes through every server it runs
// through; with another routing (measured on demand) the table is only
// reported.
func TestUpstreamConformanceThroughEveryServer(t *testing.T) {
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
	servers := cluster.Servers()
	runs := make([]suiteRun, 0, len(servers))
	for i, s := range servers {
		dir := filepath.Join(cluster.OutputDir(), "conformance", routing.String(), s.Context)
		everyOnly := i > 0 && !fullEverywhere
		r, err := runSelection(t, s.Context, dir, everyOnly)
		if err != nil {
			t.Fatalf("through %s: %v", s.Context, err)
		}
		runs = append(runs, r)
	}

	table := resultTable(runs)
	summary := filepath.Join(cluster.OutputDir(), "conformance", routing.String(), "summary.md")
	if err := os.WriteFile(summary, []byte(table), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("routing %s, results (%s):\n%s", routing, summary, table)
	if routing != localcluster.RoutingPeerDiscovery {
		return
	}

	full := runs[0] // the whole selection
	for _, r := range runs {
		if len(r.outcomes) == 0 {
			t.Errorf("through %s: no test ran", r.context)
		}
		for name, o := range r.outcomes {
			if o != "passed" {
				t.Errorf("through %s: %s: %s", r.context, name, o)
			}
			if _, ok := full.outcomes[name]; !ok {
				t.Errorf("through %s: %s ran, but not through %s", r.context, name, full.context)
			}
		}
		if !r.everyOnly {
			for name := range full.outcomes {
				if _, ok := r.outcomes[name]; !ok {
					t.Errorf("through %s: %s did not run (it ran through %s)", r.context, name, full.context)
				}
			}
		}
		for _, want := range newerReleaseOnly {
			if got := r.find(want); got != "passed" {
				t.Errorf("through %s: the v1.37-only API test %q: %s", r.context, want, got)
			}
		}
	}
}

// suiteRun is one server's outcomes: test name -> JUnit status.
type suiteRun struct {
	context   string
	everyOnly bool // only the focus-every rules ran
	outcomes  map[string]string
	took      time.Duration
}

// find is the outcome of the one test whose name contains fragment.
func (r suiteRun) find(fragment string) string {
	var found []string
	for name := range r.outcomes {
		if strings.Contains(name, fragment) {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		return fmt.Sprintf("%d tests match", len(found))
	}
	return r.outcomes[found[0]]
}

// runSelection runs hack/conformance.sh through one kubeconfig context and
// reads its JUnit report.
func runSelection(t *testing.T, kubeContext, dir string, everyOnly bool) (suiteRun, error) {
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	start := time.Now()
	args := []string{"--kubeconfig", cluster.Kubeconfig(), "--context", kubeContext, "--report-dir", dir}
	if everyOnly {
		args = append(args, "--every-server-only")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.RepoRoot(), "hack", "conformance.sh"), args...)
	cmd.Env = append(os.Environ(), "PEERDISCOVERY_OUTPUT_DIR="+cluster.OutputDir())
	// On timeout the whole group goes, e2e.test included, not just the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Second)
	t.Logf("hack/conformance.sh --context %s: %v in %s\n%s", kubeContext, exitString(err), took, out)
	outcomes, rerr := readJUnit(filepath.Join(dir, "junit_01.xml"))
	if rerr != nil {
		return suiteRun{}, fmt.Errorf("%v (hack/conformance.sh: %v; log %s)", rerr, exitString(err), filepath.Join(dir, "e2e.log"))
	}
	return suiteRun{context: kubeContext, everyOnly: everyOnly, outcomes: outcomes, took: took}, nil
}

func exitString(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// junitReport is the part of ginkgo's JUnit report read here.
type junitReport struct {
	Suites []struct {
		Cases []struct {
			Name    string `xml:"name,attr"`
			Status  string `xml:"status,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJUnit returns the outcome of every spec the selection chose: specs
// left out by focus or skip are not in it, suite set-up nodes neither.
func readJUnit(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep junitReport
	if err := xml.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			name, ok := strings.CutPrefix(c.Name, "[It] ")
			if !ok {
				continue // [SynchronizedBeforeSuite] and the like
			}
			if c.Status == "skipped" && c.Skipped != nil && c.Skipped.Message == "skipped" {
				continue // filtered out by focus or skip
			}
			out[name] = c.Status
		}
	}
	return out, nil
}

// resultTable is a Markdown table: one row per test, one column per
// server, and a total row.
func resultTable(runs []suiteRun) string {
	names := map[string]bool{}
	for _, r := range runs {
		for n := range r.outcomes {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var b strings.Builder
	b.WriteString("| test |")
	for _, r := range runs {
		scope := ""
		if r.everyOnly {
			scope = " (focus-every rules)"
		}
		fmt.Fprintf(&b, " through %s%s |", r.context, scope)
	}
	b.WriteString("\n|---|")
	for range runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, n := range sorted {
		fmt.Fprintf(&b, "| %s |", n)
		for _, r := range runs {
			o := r.outcomes[n]
			if o == "" {
				o = "not run"
			}
			fmt.Fprintf(&b, " %s |", o)
		}
		b.WriteString("\n")
	}
	b.WriteString("| **passed** |")
	for _, r := range runs {
		passed := 0
		for _, o := range r.outcomes {
			if o == "passed" {
				passed++
			}
		}
		fmt.Fprintf(&b, " **%d of %d** (%s) |", passed, len(r.outcomes), r.took)
	}
	b.WriteString("\n")
	return b.String()
}
