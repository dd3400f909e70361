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
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
