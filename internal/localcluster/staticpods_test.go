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
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testNodeCluster is a Cluster of n kube-apiservers on nodes, with its
// PKI, not started.
func testNodeCluster(t *testing.T, versions ...string) *Cluster {
	t.Helper()
	runDir := t.TempDir()
	p, err := newPKI(filepath.Join(runDir, "pki"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{runDir: runDir, logDir: filepath.Join(runDir, "logs"), pki: p,
		nodes: &nodePlane{runID: "abc123", spec: NodesSpec{Enabled: true, Version: versions[0]}}}
	c.cfg.Verbosity = 2
	c.cfg.ControllerManager = ControllerManagerSpec{Version: versions[0], Controllers: []string{"*"}}
	for i, v := range versions {
		s := &kubeServer{index: i, name: "kube-apiserver-" + nodeName(i), ip: net.IPv4(10, 254, 88, byte(10+i)).To4(),
			spec: ServerSpec{Version: v, ExtraFlags: []string{"--v=4"}}, binary: "/nonexistent"}
		if s.certs[0], s.certs[1], err = p.kubeAPIServerCert(s.name, []net.IP{s.ip}); err != nil {
			t.Fatal(err)
		}
		c.servers = append(c.servers, s)
		c.nodes.nodes = append(c.nodes.nodes, &node{index: i, name: nodeName(i), ip: s.ip,
			dir: filepath.Join(runDir, "nodes", nodeName(i)), runtime: filepath.Join("/run/peerdiscovery/abc123", nodeName(i)),
			cgroup: filepath.Join(cgroupBase, "abc123", nodeName(i))})
	}
	return c
}

// TestKubeAPIServerPod: the static pod runs the process plane's flags with
// the paths it mounts (no path of the run folder is left), plus what a
// server on a node needs, with the test's extra flags still last; every
// mounted path is the node's or the logs'; the pod runs as the images'
// user, on the host network, probed on the node's address.
func TestKubeAPIServerPod(t *testing.T) {
	c := testNodeCluster(t, "v1.36.3", "v1.37.2")
	n, s := c.nodes.nodes[1], c.servers[1]
	pod, err := c.kubeAPIServerPod(n, s)
	if err != nil {
		t.Fatal(err)
	}
	cmd := pod.Spec.Containers[0].Command
	if cmd[0] != "kube-apiserver" || pod.Spec.Containers[0].Image != "registry.k8s.io/peerdiscovery/kube-apiserver:v1.37.2" {
		t.Errorf("command %s, image %s", cmd[0], pod.Spec.Containers[0].Image)
	}
	flags := map[string]string{}
	for _, a := range cmd[1:] {
		k, v, _ := strings.Cut(a, "=")
		flags[k] = v
		if strings.Contains(v, c.runDir) {
			t.Errorf("%s: a path of the run folder in the static pod", a)
		}
	}
	for k, want := range map[string]string{
		"--tls-cert-file":                    "/etc/kubernetes/pki/apiserver.crt",
		"--client-ca-file":                   "/etc/kubernetes/pki/ca.crt",
		"--peer-ca-file":                     "/etc/kubernetes/pki/ca.crt",
		"--service-account-signing-key-file": "/etc/kubernetes/pki/sa.key",
		"--proxy-client-key-file":            "/etc/kubernetes/pki/front-proxy-client.key",
		"--audit-log-path":                   "/var/log/kubernetes/audit/audit.log",
		"--audit-policy-file":                "/etc/kubernetes/audit-policy.yaml",
		"--advertise-address":                "10.254.88.11",
		"--peer-advertise-ip":                "10.254.88.11",
		"--enable-admission-plugins":         "NodeRestriction",
		"--kubelet-certificate-authority":    "/etc/kubernetes/pki/ca.crt",
	} {
		if flags[k] != want {
			t.Errorf("%s=%q, want %q", k, flags[k], want)
		}
	}
	if cmd[len(cmd)-1] != "--v=4" {
		t.Errorf("the extra flags are not last: %v", cmd[len(cmd)-3:])
	}
	for _, v := range pod.Spec.Volumes {
		p := v.HostPath.Path
		if !strings.HasPrefix(p, n.dir) && !strings.HasPrefix(p, c.logDir) {
			t.Errorf("volume %s mounts %s, outside the node's folder and the logs", v.Name, p)
		}
	}
	sc := pod.Spec.SecurityContext
	if !pod.Spec.HostNetwork || sc == nil || *sc.RunAsUser != imageUID || !*sc.RunAsNonRoot {
		t.Errorf("hostNetwork %v, security context %+v", pod.Spec.HostNetwork, sc)
	}
	if h := pod.Spec.Containers[0].ReadinessProbe.HTTPGet; h.Host != "10.254.88.11" || h.Path != "/readyz" {
		t.Errorf("readiness probe %+v", h)
	}
	names := []string{}
	for _, p := range c.controlPlanePods(c.nodes.nodes[controlNode]) {
		names = append(names, p.Name)
		for _, a := range p.Spec.Containers[0].Command {
			if strings.Contains(a, c.runDir) {
				t.Errorf("%s: %s: a path of the run folder", p.Name, a)
			}
		}
	}
	if !slices.Equal(names, []string{"kube-controller-manager", "kube-scheduler"}) {
		t.Errorf("control-plane pods %v", names)
	}
}
