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
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// nodeLogPaths adds the nodes' logs: each node's containerd and kubelet,
// its Pods' container logs (a folder), and kube-proxy's.
func (c *Cluster) nodeLogPaths(m map[string]string) {
	for _, n := range c.nodes.nodes {
		m[n.name+"-containerd"] = c.logPath(n.name + "-containerd")
		m[n.name+"-kubelet"] = c.logPath(n.name + "-kubelet")
		m[n.name+"-pods"] = n.podLogsDir()
	}
	m["kube-proxy"] = c.logPath("kube-proxy")
}

// nodesHealth reports a node process that exited.
func (c *Cluster) nodesHealth() error {
	var errs []error
	for _, n := range c.nodes.nodes {
		for _, p := range []*process{n.holder, n.containerd, n.kubelet} {
			if p == nil {
				continue
			}
			if err := p.exitErr(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w (log: %s)", n.name, err, p.logPath))
			}
		}
	}
	if p := c.nodes.proxy; p != nil {
		if err := p.exitErr(); err != nil {
			errs = append(errs, fmt.Errorf("%w (log: %s)", err, p.logPath))
		}
	}
	return errors.Join(errs...)
}

// processServer is server i of the process plane; on the node-based plane
// the kubelet runs the servers (UpgradeStaticPod replaces one).
func (c *Cluster) processServer(i int) (*kubeServer, error) {
	if c.nodes != nil {
		return nil, errors.New("the kube-apiservers of the node-based plane are static pods: the kubelet starts and stops them (UpgradeStaticPod)")
	}
	return c.server(i)
}

// NodeInfo describes one node of the node-based plane.
type NodeInfo struct {
	// Name is the Node's name and the node's hostname.
	Name, IP string
	// ManifestsDir is its static pod manifests folder (kubeadm's
	// /etc/kubernetes/manifests).
	ManifestsDir string
	// KubeletLog, ContainerdLog are the logs of its kubelet and
	// containerd; PodLogsDir the kubelet's container logs.
	KubeletLog, ContainerdLog, PodLogsDir string
}

// Nodes are the nodes of the node-based plane (none on the process plane).
func (c *Cluster) Nodes() []NodeInfo {
	if c.nodes == nil {
		return nil
	}
	var out []NodeInfo
	for _, n := range c.nodes.nodes {
		out = append(out, NodeInfo{Name: n.name, IP: n.ip.String(), ManifestsDir: n.manifestsDir(),
			KubeletLog: c.logPath(n.name + "-kubelet"), ContainerdLog: c.logPath(n.name + "-containerd"), PodLogsDir: n.podLogsDir()})
	}
	return out
}

// NodeUsage is what a node's cgroups used: system is its containerd,
// kubelet and shims, pods its containers.
type NodeUsage struct {
	Name string
	// CPU is the CPU time used since the node started; Memory the
	// resident memory now (cgroup v1 memory.stat total_rss: without the
	// page cache, which the images' import fills).
	SystemCPU, PodsCPU       time.Duration
	SystemMemory, PodsMemory int64
}

// NodesUsage reads every node's cgroups (cpuacct and memory).
func (c *Cluster) NodesUsage() ([]NodeUsage, error) {
	if c.nodes == nil {
		return nil, errors.New("not a node-based plane")
	}
	read := func(hierarchy, rel, file string) (int64, error) {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", hierarchy, rel, file))
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	var out []NodeUsage
	for _, n := range c.nodes.nodes {
		u := NodeUsage{Name: n.name}
		var err error
		var ns int64
		if ns, err = read("cpuacct", filepath.Join(n.cgroup, "system"), "cpuacct.usage"); err != nil {
			return nil, err
		}
		u.SystemCPU = time.Duration(ns)
		if ns, err = read("cpuacct", filepath.Join(n.cgroup, "kubepods"), "cpuacct.usage"); err != nil {
			return nil, err
		}
		u.PodsCPU = time.Duration(ns)
		if u.SystemMemory, err = cgroupRSS(filepath.Join(n.cgroup, "system")); err != nil {
			return nil, err
		}
		if u.PodsMemory, err = cgroupRSS(filepath.Join(n.cgroup, "kubepods")); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// cgroupRSS is total_rss of the v1 memory cgroup rel (it and below).
func cgroupRSS(rel string) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", rel, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "total_rss "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no total_rss in %s", rel)
}
