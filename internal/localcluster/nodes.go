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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodesSpec runs the control plane the way a kubeadm cluster runs it: on
// nodes, one per kube-apiserver. Each node is a UTS namespace (its
// hostname: kube-apiserver derives its identity from it), a mount
// namespace of its own, a containerd (Debian's, with runc and the CNI
// bridge and host-local plugins) and a kubelet, all inside the cluster's
// one network namespace, each at its kube-apiserver's address. The
// kube-apiservers are static pods from a kubeadm-layout manifests folder;
// kube-controller-manager and kube-scheduler are static pods on the first
// node; kube-proxy (iptables) serves the Service ClusterIPs for the whole
// network namespace; peerdiscovery-apiserver is installed with
// `kubectl apply -k` of an overlay of artifacts/deploy and
// hack/deploy-certs.sh, as its users install it. Images come from
// hack/build-images.sh (imported with ctr; nothing is pulled).
type NodesSpec struct {
	// Enabled turns the node-based plane on.
	Enabled bool
	// Version is the release of the kubelets, kube-scheduler, kube-proxy
	// and kube-controller-manager (default: the oldest server's).
	Version string
	// Overlay is the kustomization the extension is installed from
	// (default: artifacts/deploy/overlays/ha); the harness applies an
	// overlay of it that sets only the image.
	Overlay string
	// UpgradeVersions are kube-apiserver releases imported on every node
	// besides the servers' own, for UpgradeStaticPod.
	UpgradeVersions []string
}

// Fixed values of the node-based plane.
const (
	// ImageRegistry is hack/build-images.sh's registry
	// (kubeadm's imageRepository).
	ImageRegistry = "registry.k8s.io/peerdiscovery"
	// PauseImage is the sandbox image of every Pod.
	PauseImage = ImageRegistry + "/pause:3.10.1"
	// PodSubnetPrefix: node i's Pods get 10.244.<i>.0/24 on a bridge of
	// their own (pdbr<i>) in the cluster's network namespace.
	podSubnetPrefix = "10.244."
	// The first node also runs kube-controller-manager and kube-scheduler.
	controlNode = 0
	// nodeRuntimeBase holds each node's tmpfs (kubelet root, containerd
	// state and sockets): /run/peerdiscovery/<run>/<node>. Short on
	// purpose: unix sockets live there.
	nodeRuntimeBase = "/run/peerdiscovery"
)

// node is one node of the plane.
type node struct {
	index int
	name  string // node-<i>, also its hostname and Node name
	ip    net.IP // its kube-apiserver's address
	// dir is <run>/nodes/<name> on disk: etc/kubernetes (manifests, pki,
	// kubeconfigs), containerd's root, CNI configuration, Pod logs.
	dir string
	// runtime is the node's tmpfs (mounted in its own mount namespace
	// only): the kubelet's root and containerd's state and sockets.
	runtime string
	cgroup  string // peerdiscovery/<run>/<name>

	holder, containerd, kubelet *process
}

func (n *node) etcKubernetes() string { return filepath.Join(n.dir, "etc", "kubernetes") }
func (n *node) manifestsDir() string  { return filepath.Join(n.etcKubernetes(), "manifests") }
func (n *node) pkiDir() string        { return filepath.Join(n.etcKubernetes(), "pki") }
func (n *node) containerdSocket() string {
	return filepath.Join(n.runtime, "containerd", "containerd.sock")
}
func (n *node) podLogsDir() string { return filepath.Join(n.dir, "pods") }
func (n *node) podSubnet() string  { return fmt.Sprintf("%s%d.0/24", podSubnetPrefix, n.index) }

// nodePlane is the node-based plane's state in a Cluster.
type nodePlane struct {
	spec   NodesSpec
	runID  string // the network namespace's random part
	nodes  []*node
	proxy  *process
	images map[string]string // image reference -> archive
	// kubelet, kube-proxy: host binaries; the rest run from images.
	kubeletBin, proxyBin string
}

// nodeName is the name (and hostname) of node i.
func nodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// nodeHostDirs are created on the host (empty) to be mount points of a
// node's tmpfs: containerd's shim sockets (/run/containerd/s, not
// configurable), the CNI result cache, the kubelet's /var/log/containers
// links and its device plugin socket (/var/lib/kubelet/device-plugins,
// which --root-dir does not move: three kubelets starting at once in one
// such folder race on kubelet.sock, and the loser exits with "bind:
// address already in use", as test/nodeplane did in CI). Mounted over in
// each node's mount namespace, nothing of a node lands on the host's.
var nodeHostDirs = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/lib/kubelet/device-plugins"}

// holderScript makes the node's mounts, sets its hostname and holds its
// namespaces (sleep) for containerd and the kubelet to join.
func (c *Cluster) holderScript(n *node) (string, error) {
	join, err := cgroupJoinScript(filepath.Join(n.cgroup, "system"))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(join)
	fmt.Fprintf(&b, "hostname %s && ", shellJoin([]string{n.name}))
	for _, d := range append(append([]string{}, nodeHostDirs...), n.runtime) {
		fmt.Fprintf(&b, "mount -t tmpfs -o mode=0755 tmpfs %s && ", shellJoin([]string{d}))
	}
	b.WriteString("exec sleep infinity")
	return b.String(), nil
}

// nodeArgv runs argv in node n's namespaces (mount, UTS, network: the
// holder's) and cgroup.
func (c *Cluster) nodeArgv(n *node, argv ...string) ([]string, error) {
	join, err := cgroupJoinScript(filepath.Join(n.cgroup, "system"))
	if err != nil {
		return nil, err
	}
	pid := n.holder.pid()
	if pid == 0 {
		return nil, fmt.Errorf("%s is not running", n.name)
	}
	return append([]string{"nsenter", "-t", strconv.Itoa(pid), "-m", "-u", "-n", "--", "sh", "-c", join + `exec "$@"`, "sh"}, argv...), nil
}

// runOnNode runs a short command in node n and returns its output.
func (c *Cluster) runOnNode(ctx context.Context, n *node, argv ...string) (string, error) {
	full, err := c.nodeArgv(n, argv...)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, full[0], full[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %w: %s", strings.Join(argv, " "), n.name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

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

// waitNodesReady waits until every Node is Ready and every static pod's
// mirror pod is Running in kube-system.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	cs, err := c.adminClientset()
	if err != nil {
		return err
	}
	return c.waitFor(ctx, nil, "every Node Ready and its mirror pods Running", func(ctx context.Context) (bool, string) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := map[string]bool{}
		for _, nd := range nodes.Items {
			for _, cond := range nd.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready[nd.Name] = true
				}
			}
		}
		for _, n := range c.nodes.nodes {
			if !ready[n.name] {
				return false, "Node " + n.name + " not Ready"
			}
		}
		return c.mirrorPodsRunning(ctx, cs)
	})
}

// mirrorPodsRunning checks that every static pod has a Running mirror pod.
func (c *Cluster) mirrorPodsRunning(ctx context.Context, cs kubernetes.Interface) (bool, string) {
	pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	running := map[string]bool{}
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror && p.Status.Phase == corev1.PodRunning {
			running[p.Name] = true
		}
	}
	for _, want := range c.staticPodNames() {
		if !running[want] {
			return false, "mirror pod " + want + " not Running"
		}
	}
	return true, ""
}

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
