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
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// stopNodes stops the kubelets first (no restarts behind our back), then
// every Pod's processes, containerd and the holders, by their cgroups; the
// nodes' mount namespaces, and with them every mount they made, go with
// their last process. Then the cgroups are removed.
func (c *Cluster) stopNodes() error {
	np := c.nodes
	var errs []error
	if np.proxy != nil {
		errs = append(errs, np.proxy.stop(syscall.SIGTERM, 5*time.Second))
	}
	for _, n := range np.nodes {
		if n.kubelet != nil {
			errs = append(errs, n.kubelet.stop(syscall.SIGTERM, 10*time.Second))
		}
	}
	for _, n := range np.nodes {
		// The containers (kube-apiservers take their shutdown delay) in
		// one go: SIGTERM to every process of the Pods, then SIGKILL.
		pids := cgroupPIDs(filepath.Join(n.cgroup, "kubepods"))
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, n := range np.nodes {
		for time.Now().Before(deadline) && len(cgroupPIDs(filepath.Join(n.cgroup, "kubepods"))) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, n := range np.nodes {
		if n.containerd != nil {
			errs = append(errs, n.containerd.stop(syscall.SIGTERM, 5*time.Second))
		}
		if n.holder != nil {
			errs = append(errs, n.holder.stop(syscall.SIGTERM, 2*time.Second))
		}
	}
	errs = append(errs, cleanNodeRun(c.runDir, np.runID))
	return errors.Join(errs...)
}

// cleanNodeRun kills whatever is left in a run's cgroups (shims,
// containers) and removes them, then removes the run's runtime folder (its
// tmpfs mounts lived in the nodes' own mount namespaces only) and the
// nodes' containerd roots (the unpacked images, ~1 GB a node; skipped
// without a runDir). A no-op for a run of the process plane.
func cleanNodeRun(runDir, runID string) error {
	rel := filepath.Join(cgroupBase, runID)
	var errs []error
	if err := killCgroup(rel, 15*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroup(rel); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(filepath.Join(nodeRuntimeBase, runID)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && runDir != "" {
		roots, _ := filepath.Glob(filepath.Join(runDir, "nodes", "*", "containerd"))
		for _, r := range roots {
			if err := os.RemoveAll(r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
