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

package kubeadm

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/test/upgradedrill"
	"sigs.k8s.io/peerdiscovery/test/workload"
)

// followEvery is how often the workload reads the plane's load balancer
// (haproxy checks /readyz every 500 ms, out after 2 failures).
const followEvery = 100 * time.Millisecond

// TestUpgradeUnderLoad rolls the plane from v1.36.3 to v1.37.2 node by
// node with kubeadm (hack/kubeadm-plane.sh upgrade-node: upgrade apply on
// node-0, upgrade node on the others, each with the kubelet's upgrade and
// restart, the node out of haproxy's rotation meanwhile) while the
// upgrade drill's workload runs through every server haproxy has in
// rotation: no false 404, nothing failed after client-go's retries, no
// write lost or applied twice, informers equal to the final list, deleted
// namespaces gone with their objects.
func TestUpgradeUnderLoad(t *testing.T) {
	needPlane(t)
	if !upgrade {
		t.Skip("the upgrade runs on demand: PEERDISCOVERY_KUBEADM=upgrade (hack/kubeadm-upgrade.sh)")
	}
	plan := upgradedrill.FullPlan()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	var configs []*rest.Config
	for i := range nodes {
		configs = append(configs, serverConfig(t, i))
	}
	if err := workload.SetUp(ctx, configs, upgradedrill.Namespace); err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprintf("k%d", time.Now().UnixNano()%1e6)
	var newServed atomic.Bool
	start := time.Now()
	w, err := workload.New(workload.Config{
		Run: run, Namespace: upgradedrill.Namespace, Kinds: upgradedrill.Kinds,
		Rate: plan.Rate, Workers: plan.Workers, MaxDuration: 35 * time.Minute, Seed: plan.Seed,
		UserAgent: "kubeadm-upgrade/via-",
		// Sent only once a server of the newer release is ready, so every
		// 404 is false.
		Sendable: func(k workload.Kind) bool {
			return k.Name != workload.StorageVersionMigrations.Name || newServed.Load()
		},
		NamespaceEvery: plan.NamespaceEvery, NamespaceLife: plan.NamespaceLife,
	}, configs, start)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := workload.NewInformers(configs, run)
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Stop()
	if err := inf.Start(ctx, workload.Deployments, time.Minute); err != nil {
		t.Fatal(err)
	}
	hctx, cancelFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	// stopChecks returns once the follower has stopped: nothing of it
	// runs after the test.
	stopChecks := func() { cancelFollow(); <-followed }
	defer cancelFollow()
	// When each server left and rejoined the rotation, logged at the end.
	var (
		rotationMu sync.Mutex
		rotation   []string
		inRotation [nodes]atomic.Bool
	)
	for i := range configs {
		inRotation[i].Store(true)
	}
	// The workload sends to a server only while the plane's haproxy would
	// (its /readyz check, and the runbook's drain before a node's roll).
	go followLoadBalancer(hctx, t, followed, filepath.Join(planeDir, "haproxy.sock"), func(i int, in bool) {
		if inRotation[i].Swap(in) != in {
			rotationMu.Lock()
			rotation = append(rotation, fmt.Sprintf("%.1fs: node-%d %s", w.Since().Seconds(), i, map[bool]string{true: "back in rotation", false: "out of rotation"}[in]))
			rotationMu.Unlock()
		}
		w.SetInRotation(i, in)
	})
	wctx, stopWorkload := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	defer func() { stopWorkload(); <-done }()

	var phases []upgradedrill.Phase
	phase := func(name string) {
		if n := len(phases); n > 0 {
			phases[n-1].End = w.Since()
		}
		phases = append(phases, upgradedrill.Phase{Name: name, Start: w.Since()})
		w.SetPhase(len(phases) - 1)
		t.Logf("%.1fs: %s", w.Since().Seconds(), name)
	}
	etcdBefore := etcdContainers(ctx, t)
	phase("warmup: 3 × " + from)
	time.Sleep(plan.Warmup)
	for i := range nodes {
		phase(fmt.Sprintf("kubeadm upgrade of node-%d to %s", i, to))
		if err := plane("upgrade-node", strconv.Itoa(i), to); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			newServed.Store(true)
			if err := inf.Start(ctx, workload.StorageVersionMigrations, 0); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(plan.Settle)
	}
	phase("tail")
	time.Sleep(plan.Tail)
	stopWorkload()
	<-done
	phases[len(phases)-1].End = w.Since()
	stopChecks()
	// Each stop of the etcd leader would hand leadership over and fail the
	// writes in flight; the roll stops no etcd.
	for node, id := range etcdContainers(ctx, t) {
		if id != etcdBefore[node] {
			t.Errorf("%s's etcd restarted during the roll: container %s, then %s", node, etcdBefore[node], id)
		}
	}
	rotationMu.Lock()
	t.Logf("load balancer:\n%s", strings.Join(rotation, "\n"))
	rotationMu.Unlock()
	rec := w.Records()

	final, err := dynamic.NewForConfig(configs[0])
	if err != nil {
		t.Fatal(err)
	}
	clientFor := func(workload.Kind) dynamic.Interface { return final }
	quorum := func(ctx context.Context) (map[string][]unstructured.Unstructured, error) {
		return workload.QuorumLists(ctx, upgradedrill.Kinds, clientFor, run)
	}
	lists, err := quorum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res := &upgradedrill.Result{
		Routing: routing + " (kubeadm)", Plan: plan, Run: run, Started: start, Phases: phases,
		Samples: rec.Samples, Attempts: rec.Attempts, Skipped: rec.Skipped,
		Writes:    workload.CheckWrites(rec.Creates, lists),
		Informers: inf.Converge(ctx, nil, upgradedrill.Kinds, quorum, time.Minute),
	}
	nctx, ncancel := context.WithTimeout(ctx, 2*time.Minute)
	res.Namespaces = workload.CheckNamespaces(nctx, rec.Namespaces, upgradedrill.Kinds, clientFor, w.Since)
	ncancel()
	writeResult(t, res)
	if routing != "peerdiscovery" {
		// Upstream's proxy is reported, not held to the bar (as the drill
		// does).
		report(t, res)
		return
	}
	checkUpgrade(t, res, plan)
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
	defer ccancel()
	checkPlane(cctx, t, to)
	// docs/operations.md, section 5: the upgrade's commands and
	// configuration.
	checkDocsHaveFiles(t, 0, "kubeadm/upgrade.yaml")
	checkDocsHaveCommands(t)
}

// followLoadBalancer calls set(i, in) every followEvery with whether
// haproxy sends new connections to node-i (status UP: its check passes
// and it is not drained), until ctx ends; then it closes done. A runtime
// API that does not answer while followed fails the test.
func followLoadBalancer(ctx context.Context, t *testing.T, done chan<- struct{}, socket string, set func(int, bool)) {
	defer close(done)
	for ctx.Err() == nil {
		up, err := loadBalancerUp(socket)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("haproxy's runtime API: %v", err)
			}
			return
		}
		for i := range nodes {
			set(i, up[fmt.Sprintf("node-%d", i)])
		}
		select {
		case <-ctx.Done():
		case <-time.After(followEvery):
		}
	}
}

// loadBalancerUp is, per server of haproxy's apiservers backend, whether
// its status is UP ("show stat" on the runtime API).
func loadBalancerUp(socket string) (map[string]bool, error) {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	r := csv.NewReader(c)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || len(rows[0]) < 18 || rows[0][0] != "# pxname" || rows[0][17] != "status" {
		return nil, fmt.Errorf("show stat: unexpected header %q", rows)
	}
	up := map[string]bool{}
	for _, row := range rows[1:] {
		if len(row) > 17 && row[0] == "apiservers" && strings.HasPrefix(row[1], "node-") {
			up[row[1]] = strings.HasPrefix(row[17], "UP") // "UP 1/2": going down, still sent to
		}
	}
	if len(up) != nodes {
		return nil, fmt.Errorf("show stat: %d nodes in backend apiservers, want %d", len(up), nodes)
	}
	return up, nil
}

// report logs each phase's counts.
func report(t *testing.T, res *upgradedrill.Result) {
	perPhase, _ := upgradedrill.Summarize(res)
	for i, c := range perPhase {
		t.Logf("%s: %d operations, %d ok, %d 404, %d failed", res.Phases[i].Name, c.Ops, c.OK, c.NotFound, c.Failed)
	}
	t.Logf("writes: %s; informers equal: %d of %d; namespaces: %d", res.Writes, func() int { e, _ := res.InformersEqual(); return e }(), len(res.Informers), len(res.Namespaces))
}

// checkUpgrade holds the kubeadm upgrade to the drill's bar (two
// informers per server).
func checkUpgrade(t *testing.T, res *upgradedrill.Result, plan upgradedrill.Plan) {
	report(t, res)
	for _, v := range upgradedrill.Violations(res, plan, 2*nodes) {
		t.Error(v)
	}
}

// writeResult keeps res in _output/kubeadm-upgrade/drill-kubeadm.json
// beside the other routing's last result (hack/drill-report's input:
// hack/kubeadm-upgrade.sh draws the table and the timeline from it), and
// logs its report.
func writeResult(t *testing.T, res *upgradedrill.Result) {
	dir := filepath.Join(outputDir(), "kubeadm-upgrade")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "drill-kubeadm.json")
	var all []*upgradedrill.Result
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &all); err != nil {
			t.Logf("replacing %s: %v", path, err)
			all = nil
		}
	}
	all = slices.DeleteFunc(all, func(r *upgradedrill.Result) bool { return r.Routing == res.Routing })
	// This project's first, as the drill's reports list them.
	if routing == "peerdiscovery" {
		all = append([]*upgradedrill.Result{res}, all...)
	} else {
		all = append(all, res)
	}
	data, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm upgrade (%s):\n%s", routing, upgradedrill.Markdown(res))
}
