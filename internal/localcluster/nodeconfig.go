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
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/peerdiscovery/internal/pki"
)

// The user the control-plane images run as (hack/build-images.sh): the
// files their static pods mount belong to it, as kubeadm's rootless
// control plane arranges.
const imageUID = 65532

// Paths inside the control-plane containers, as kubeadm lays them out.
const (
	podPKIDir      = "/etc/kubernetes/pki"
	podAuditPolicy = "/etc/kubernetes/audit-policy.yaml"
	podAuditDir    = "/var/log/kubernetes/audit"
)

// writeNodeFiles writes node n's configuration: its pki folder (the
// certificates its static pods mount, owned by the images' user), the
// kubeconfigs, containerd's and the kubelet's configuration and the CNI
// network.
func (c *Cluster) writeNodeFiles(n *node) error {
	p := c.pki
	s := c.servers[n.index]
	copies := map[string]string{
		p.caFile:               "ca.crt",
		s.certs[0]:             "apiserver.crt",
		s.certs[1]:             "apiserver.key",
		p.frontProxyCAFile:     "front-proxy-ca.crt",
		p.frontProxyClientCert: "front-proxy-client.crt",
		p.frontProxyClientKey:  "front-proxy-client.key",
		p.saKeyFile:            "sa.key",
		p.saPubFile:            "sa.pub",
	}
	for src, name := range copies {
		if err := copyFile(src, filepath.Join(n.pkiDir(), name), 0o600); err != nil {
			return err
		}
	}
	// kube-apiserver's client certificate for the kubelets (logs, exec):
	// a cluster admin, as kubeadm's apiserver-kubelet-client.
	kc, err := p.ca.NewClientCert("kube-apiserver-kubelet-client", []string{"system:masters"})
	if err != nil {
		return err
	}
	if _, _, err := kc.Write(n.pkiDir(), "apiserver-kubelet-client", true); err != nil {
		return err
	}
	// The kubelet's serving certificate, from the cluster CA, so that
	// kube-apiserver verifies it (--kubelet-certificate-authority).
	ks, err := p.ca.NewServingCert(n.name, []string{n.name}, []net.IP{n.ip})
	if err != nil {
		return err
	}
	kubeletPKI := filepath.Join(n.dir, "kubelet-pki")
	if err := os.MkdirAll(kubeletPKI, 0o700); err != nil {
		return err
	}
	if _, _, err := ks.Write(kubeletPKI, "kubelet", true); err != nil {
		return err
	}

	// Kubeconfigs, kubeadm's names, each pointing at the node's own
	// kube-apiserver.
	server := c.endpoint(s)
	confs := []struct {
		file, user string
		groups     []string
	}{
		{"kubelet.conf", "system:node:" + n.name, []string{"system:nodes"}},
	}
	if n.index == controlNode {
		confs = append(confs,
			struct {
				file, user string
				groups     []string
			}{"controller-manager.conf", "system:kube-controller-manager", nil},
			struct {
				file, user string
				groups     []string
			}{"scheduler.conf", "system:kube-scheduler", nil})
	}
	for _, cf := range confs {
		kp, err := p.ca.NewClientCert(cf.user, cf.groups)
		if err != nil {
			return err
		}
		if err := writeCertKubeconfig(filepath.Join(n.etcKubernetes(), cf.file), server, cf.user, p.ca.CertPEM, kp); err != nil {
			return err
		}
	}
	if err := copyFile(filepath.Join(c.runDir, auditPolicyFile), filepath.Join(n.etcKubernetes(), "audit-policy.yaml"), 0o644); err != nil {
		return err
	}
	auditDir := c.nodeAuditDir(n.index)
	if err := os.MkdirAll(auditDir, 0o755); err != nil {
		return err
	}
	// What the static pods mount belongs to their user.
	for _, d := range []string{n.pkiDir(), auditDir} {
		if err := chownTree(d, imageUID); err != nil {
			return err
		}
	}
	for _, f := range []string{"controller-manager.conf", "scheduler.conf"} {
		if err := os.Chown(filepath.Join(n.etcKubernetes(), f), imageUID, imageUID); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Chmod(n.pkiDir(), 0o700); err != nil {
		return err
	}

	if err := c.writeContainerdConfig(n); err != nil {
		return err
	}
	if err := c.writeCNIConfig(n); err != nil {
		return err
	}
	return c.writeKubeletConfig(n, filepath.Join(kubeletPKI, "kubelet.crt"), filepath.Join(kubeletPKI, "kubelet.key"))
}

// nodeAuditDir is kube-apiserver i's audit log folder on the host
// (mounted at podAuditDir).
func (c *Cluster) nodeAuditDir(i int) string {
	return filepath.Join(c.logDir, fmt.Sprintf("kube-apiserver-%d-audit", i))
}

// writeContainerdConfig writes containerd's configuration: its own root
// (on disk), state and sockets (the node's tmpfs), the CRI plugin with the
// local pause image, runc with cgroupfs (the kubelet's driver), the
// node's CNI network, and no plugin that reaches outside the node.
func (c *Cluster) writeContainerdConfig(n *node) error {
	state := filepath.Join(n.runtime, "containerd")
	cfg := fmt.Sprintf(`# Generated by internal/localcluster for %[1]s.
version = 2
root = %[2]q
state = %[3]q
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[4]q

[ttrpc]
  address = %[5]q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # The kubelet asks for -998 for sandboxes; lowering a score needs
  # CAP_SYS_RESOURCE, which these machines' root lacks ("nsexec: failed
  # to update /proc/self/oom_score_adj: Permission denied"): keep the
  # scores at or above containerd's own.
  restrict_oom_score_adj = true
  # The Pods' network namespaces in the node's tmpfs, not /run/netns.
  netns_mounts_under_state_dir = true
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
    max_conf_num = 1
`, n.name, filepath.Join(n.dir, "containerd"), state, n.containerdSocket(), n.containerdSocket()+".ttrpc", PauseImage, filepath.Join(n.dir, "cni", "net.d"))
	return os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(cfg), 0o644)
}

// writeCNIConfig writes the node's network: a bridge of its own in the
// cluster's network namespace, gateway for the node's Pod subnet (Pods of
// different nodes reach each other through the namespace's routes), the
// host-local allocations in the node's folder, no masquerade (nothing
// leaves the namespace), and portmap.
func (c *Cluster) writeCNIConfig(n *node) error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "pd-" + c.nodes.runID + "-" + n.name,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      fmt.Sprintf("pdbr%d", n.index),
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.podSubnet()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.dir, "cni", "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "cni", "net.d", "10-bridge.conflist"), b, 0o644)
}

// writeKubeletConfig writes the kubelet's KubeletConfiguration: cgroup v1
// allowed, cgroupfs under the node's cgroup, the node's static pods,
// serving only on the node's address with a certificate from the cluster
// CA, client certificates and webhook authorization, no read-only port, no
// image garbage collection (nothing could be pulled again), eviction only
// when the host's disk or memory is all but gone.
func (c *Cluster) writeKubeletConfig(n *node, certFile, keyFile string) error {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     n.ip.String(),
		"port":                        10250,
		"readOnlyPort":                0,
		"healthzBindAddress":          n.ip.String(),
		"healthzPort":                 10248,
		"tlsCertFile":                 certFile,
		"tlsPrivateKeyFile":           keyFile,
		"staticPodPath":               n.manifestsDir(),
		"fileCheckFrequency":          "2s",
		"syncFrequency":               "10s",
		"podLogsDir":                  n.podLogsDir(),
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  "/" + n.cgroup,
		"cgroupsPerQOS":               true,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"containerRuntimeEndpoint":    "unix://" + n.containerdSocket(),
		"imageServiceEndpoint":        "unix://" + n.containerdSocket(),
		"volumePluginDir":             filepath.Join(n.runtime, "volume-plugins"),
		"clusterDomain":               "cluster.local",
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
			"nodefs.inodesFree": "1%",
		},
		// The node's disk is the host's: a dip under 1 % while a build
		// writes would otherwise taint every node for the default 5 min.
		"evictionPressureTransitionPeriod": "10s",
		"maxPods":                          32,
		"registerNode":                     true,
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]string{"clientCAFile": filepath.Join(n.pkiDir(), "ca.crt")},
		},
		"authorization":       map[string]string{"mode": "Webhook"},
		"serializeImagePulls": false,
		"shutdownGracePeriod": "0s",
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "kubelet-config.yaml"), b, 0o644)
}

// kubeletArgv is the kubelet's command line.
func (c *Cluster) kubeletArgv(n *node) []string {
	return []string{
		c.nodes.kubeletBin,
		"--config=" + filepath.Join(n.dir, "kubelet-config.yaml"),
		"--kubeconfig=" + filepath.Join(n.etcKubernetes(), "kubelet.conf"),
		"--root-dir=" + filepath.Join(n.runtime, "kubelet"),
		"--hostname-override=" + n.name,
		"--node-ip=" + n.ip.String(),
		"--v=" + strconv.Itoa(c.cfg.Verbosity),
	}
}

// writeCertKubeconfig writes a kubeconfig for server that authenticates
// with kp's client certificate.
func writeCertKubeconfig(path, server, user string, ca []byte, kp *pki.KeyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// chownTree gives dir and everything in it to uid:uid.
func chownTree(dir string, uid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
}
