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

package localcluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeCleanupAfterCrash starts a node (holder, containerd, kubelet, a
// Pod) in a child process, SIGKILLs the child as a crashed harness would
// die, and checks that the next Start's stale-run cleanup (cleanStaleRuns)
// removes everything: the Pod's processes and the shims (which outlive
// the harness: no parent-death signal reaches them), the cgroups, the
// mounts, the network namespace, the node's folders. Needs root, a
// kubelet and the pause image (hack/build-images.sh); PEERDISCOVERY_E2E=1.
func TestNodeCleanupAfterCrash(t *testing.T) {
	if dir := os.Getenv("PEERDISCOVERY_NODE_CRASH_CHILD"); dir != "" {
		crashChild(t, dir)
		return
	}
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		t.Skip("needs root, containerd and a kubelet; on demand with the node plane (docs/testing.md): set PEERDISCOVERY_E2E=1")
	}
	out, err := (&Config{}).outputDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(out, "bin", "kubelet-v1.36.3", "kubelet"), filepath.Join(out, "images", "pause-3.10.1.tar")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v (hack/build-images.sh builds it)", err)
		}
	}
	localUp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNodeCleanupAfterCrash$", "-test.v")
	cmd.Env = append(os.Environ(), "PEERDISCOVERY_NODE_CRASH_CHILD="+localUp, "PEERDISCOVERY_OUTPUT_DIR="+out)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var runID string
	sc := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
	for sc.Scan() {
		t.Logf("child: %s", sc.Text())
		if id, ok := strings.CutPrefix(sc.Text(), "NODE READY "); ok {
			runID = id
			break
		}
	}
	deadline.Stop()
	// The crash.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if runID == "" {
		t.Fatal("the child did not start its node")
	}
	rel := filepath.Join(cgroupBase, runID)
	time.Sleep(time.Second)
	left := cgroupPIDs(rel)
	if len(left) == 0 {
		t.Fatal("nothing outlived the crash: the test proves nothing")
	}
	t.Logf("after the crash, %d processes left in %s", len(left), rel)

	cleanStaleRuns(localUp, DefaultKeepRuns, t.Logf)

	if pids := cgroupPIDs(rel); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	hs, _ := cgroupHierarchies()
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, rel)); err == nil {
			t.Errorf("cgroup %s left", filepath.Join(h, rel))
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", "pd-"+runID)); err == nil {
		t.Errorf("network namespace pd-%s left", runID)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, runID) || strings.Contains(l, localUp) {
			t.Errorf("mount left: %s", l)
		}
	}
	if _, err := os.Stat(filepath.Join(nodeRuntimeBase, runID)); err == nil {
		t.Errorf("%s left", filepath.Join(nodeRuntimeBase, runID))
	}
	if roots, _ := filepath.Glob(filepath.Join(localUp, "*", "nodes", "*", "containerd")); len(roots) > 0 {
		t.Errorf("containerd roots left: %v", roots)
	}
}

// crashChild starts one node with a pause Pod under localUp, as Start
// would, prints its run ID and waits to be killed.
func crashChild(t *testing.T, localUp string) {
	out := os.Getenv("PEERDISCOVERY_OUTPUT_DIR")
	c := testNodeCluster(t, "v1.36.3")
	c.cfg.Logf = t.Logf
	c.cfg.StartTimeout = 2 * time.Minute
	nw, err := newNetwork(99)
	if err != nil {
		t.Fatal(err)
	}
	c.net = nw
	c.runDir = filepath.Join(localUp, "20000101-000000-"+strings.TrimPrefix(nw.Name, "pd-"))
	c.logDir = filepath.Join(c.runDir, "logs")
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.writeMarker(); err != nil {
		t.Fatal(err)
	}
	if err := nw.create([]int{10}); err != nil {
		t.Fatal(err)
	}
	c.nodes.runID = strings.TrimPrefix(nw.Name, "pd-")
	n := c.nodes.nodes[0]
	n.ip = nw.ip(10)
	c.servers[0].ip = n.ip
	n.dir = filepath.Join(c.runDir, "nodes", n.name)
	n.runtime = filepath.Join(nodeRuntimeBase, c.nodes.runID, n.name)
	n.cgroup = filepath.Join(cgroupBase, c.nodes.runID, n.name)
	c.nodes.kubeletBin = filepath.Join(out, "bin", "kubelet-v1.36.3", "kubelet")
	c.nodes.images = map[string]string{PauseImage: filepath.Join(out, "images", "pause-3.10.1.tar")}
	if err := os.WriteFile(filepath.Join(c.runDir, auditPolicyFile), []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range nodeHostDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := c.startNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := c.importImages(ctx, n); err != nil {
		t.Fatal(err)
	}
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec:\n  containers:\n  - {name: c, image: " + PauseImage + "}\n"
	if err := os.WriteFile(filepath.Join(n.manifestsDir(), "p.yaml"), []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.startKubelet(n); err != nil {
		t.Fatal(err)
	}
	// The kubelet has no API server: it runs the static pod on its own.
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if len(cgroupPIDs(filepath.Join(n.cgroup, "kubepods"))) >= 2 {
			fmt.Printf("NODE READY %s\n", c.nodes.runID)
			time.Sleep(10 * time.Minute)
			return
		}
	}
	t.Fatalf("the Pod did not start; kubelet log:\n%s", tailFile(n.kubelet.logPath, 30))
}
