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
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// startNodes starts every node's containerd and kubelet, imports the
// images and writes the static pods; it returns when every kube-apiserver
// is ready.
func (c *Cluster) startNodes(ctx context.Context) error {
	np := c.nodes
	for _, d := range nodeHostDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(c.runDir, auditPolicyFile), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	for _, n := range np.nodes {
		if err := c.startNode(ctx, n); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	// Images in parallel: ctr import of ~5 archives per node.
	errs := make([]error, len(np.nodes))
	var wg sync.WaitGroup
	for i, n := range np.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.importImages(ctx, n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, n := range np.nodes {
		if err := c.startKubelet(n); err != nil {
			return err
		}
	}
	for i, s := range c.servers {
		if err := c.writeKubeAPIServerManifest(np.nodes[i], s); err != nil {
			return err
		}
	}
	for i, s := range c.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.waitReadyz(ctx, np.nodes[i].kubelet, s.name+" "+s.spec.Version+" (static pod)", c.AdminConfig(i)); err != nil {
				errs[i] = fmt.Errorf("%w\nlast lines of its container's log:\n%s", err, np.nodes[i].containerLogTail("kube-apiserver", 30))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// containerLogTail is the end of the newest log of the node's container
// named name (any Pod), from the kubelet's Pod logs.
func (n *node) containerLogTail(name string, lines int) string {
	logs, _ := filepath.Glob(filepath.Join(n.podLogsDir(), "*", name, "*.log"))
	newest, at := "", time.Time{}
	for _, l := range logs {
		if st, err := os.Stat(l); err == nil && st.ModTime().After(at) {
			newest, at = l, st.ModTime()
		}
	}
	if newest == "" {
		return "(no container log yet)"
	}
	return newest + ":\n" + tailFile(newest, lines)
}

// startNode makes node n's folders, cgroups, holder and containerd.
func (c *Cluster) startNode(ctx context.Context, n *node) error {
	for _, d := range []string{n.manifestsDir(), n.pkiDir(), n.podLogsDir(), filepath.Join(n.dir, "cni", "net.d"), filepath.Join(n.dir, "containerd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(n.runtime, 0o755); err != nil {
		return err
	}
	if err := ensureCgroup(filepath.Join(n.cgroup, "system")); err != nil {
		return err
	}
	if err := c.writeNodeFiles(n); err != nil {
		return err
	}
	script, err := c.holderScript(n)
	if err != nil {
		return err
	}
	n.holder = &process{
		name:    n.name,
		logPath: c.logPath(n.name),
		argv: []string{"nsenter", "--net=" + filepath.Join("/run/netns", c.net.Name), "--",
			"unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c", script},
	}
	c.cfg.Logf("starting %s (%s): hostname, mount namespace, cgroup %s", n.name, n.ip, n.cgroup)
	if err := n.holder.start(); err != nil {
		return err
	}
	// The holder is ready once its hostname is set (the last step before
	// it sleeps).
	if err := c.waitFor(ctx, n.holder, n.name+" namespaces", func(context.Context) (bool, string) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n.holder.pid()))
		return err == nil && strings.TrimSpace(string(b)) == "sleep", "holder not sleeping yet"
	}); err != nil {
		return err
	}
	argv, err := c.nodeArgv(n, "containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.containerd = &process{name: n.name + "-containerd", logPath: c.logPath(n.name + "-containerd"), argv: argv}
	if err := n.containerd.start(); err != nil {
		return err
	}
	return c.waitFor(ctx, n.containerd, n.name+" containerd", func(ctx context.Context) (bool, string) {
		out, err := c.runOnNode(ctx, n, "ctr", "--address", n.containerdSocket(), "version")
		if err != nil {
			return false, out
		}
		return true, ""
	})
}

// importImages imports every image the node may run into its containerd
// (namespace k8s.io, the CRI's).
func (c *Cluster) importImages(ctx context.Context, n *node) error {
	start := time.Now()
	for ref, archive := range c.nodes.images {
		if _, err := c.runOnNode(ctx, n, "ctr", "--address", n.containerdSocket(), "-n", "k8s.io", "images", "import", "--no-unpack=false", archive); err != nil {
			return fmt.Errorf("importing %s: %w", ref, err)
		}
	}
	c.cfg.Logf("%s: %d images imported in %s", n.name, len(c.nodes.images), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// startKubelet starts node n's kubelet.
func (c *Cluster) startKubelet(n *node) error {
	argv, err := c.nodeArgv(n, c.kubeletArgv(n)...)
	if err != nil {
		return err
	}
	n.kubelet = &process{name: n.name + "-kubelet", logPath: c.logPath(n.name + "-kubelet"), argv: argv}
	c.cfg.Logf("starting %s's kubelet %s", n.name, c.nodes.spec.Version)
	return n.kubelet.start()
}
