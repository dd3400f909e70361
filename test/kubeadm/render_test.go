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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// docBlock is the yaml block of docs/operations.md that contains marker.
func docBlock(t *testing.T, marker string) string {
	t.Helper()
	for b := range yamlBlocks(t) {
		if strings.Contains(b, marker) {
			return b
		}
	}
	t.Fatalf("docs/operations.md has no yaml block with %q", marker)
	return ""
}

// TestDocsConfigRendersTheFilter is the test command's shorter form of the
// kubeadm plane (which runs on demand): real kubeadm renders
// kube-apiserver's static Pod from docs/operations.md's init.yaml and
// image patch, and the manifest runs the filter build with the filter's
// flags, every one of them a flag that build knows.
func TestDocsConfigRendersTheFilter(t *testing.T) {
	pod := renderDocsManifest(t, "kube-apiserver", "control-plane", "apiserver")
	c := pod.Spec.Containers[0]
	if c.Image != filterImage+from {
		t.Errorf("image %s, want %s%s (the docs' patch)", c.Image, filterImage, from)
	}
	for _, want := range []string{
		"--peer-ca-file=/etc/kubernetes/pki/ca.crt",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--shutdown-delay-duration=5s",
		// kubeadm's own, which the filter needs (docs/operations.md's table).
		"--proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt",
		"--proxy-client-key-file=/etc/kubernetes/pki/front-proxy-client.key",
		"--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
		"--requestheader-allowed-names=front-proxy-client",
		"--advertise-address=10.254.88.10",
	} {
		if !slices.Contains(c.Command, want) {
			t.Errorf("the manifest lacks %s:\n%s", want, strings.Join(c.Command, "\n"))
		}
	}
	server := filepath.Join(outputDir(), "bin", "kube-apiserver-"+from, "kube-apiserver")
	help, err := exec.Command(server, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("kube-apiserver --help: %v", err)
	}
	for _, a := range c.Command[1:] {
		name, _, _ := strings.Cut(a, "=")
		if !strings.Contains(string(help), "      "+name+" ") {
			t.Errorf("the filter build of %s has no flag %s", from, name)
		}
	}
}

// TestDocsEtcdPatchKeepsItsUID: the runbook's etcd patch gives etcd's
// static Pod the UID it names, so a kubelet of another minor adopts the
// running etcd (docs/operations.md, section 3).
func TestDocsEtcdPatchKeepsItsUID(t *testing.T) {
	pod := renderDocsManifest(t, "etcd", "etcd", "local")
	if want := "0b6b2c8e-6f1e-4a57-9d3c-2f0e8c1d4a7b"; string(pod.UID) != want {
		t.Errorf("etcd's static Pod has UID %q, want the docs' patch's %q", pod.UID, want)
	}
}

// renderDocsManifest writes component's static Pod manifest as kubeadm
// init's phase does from the docs' InitConfiguration and patches, without
// applying it (--dry-run), and returns it.
func renderDocsManifest(t *testing.T, component string, phase ...string) corev1.Pod {
	t.Helper()
	kubeadm := filepath.Join(outputDir(), "bin", "kubeadm-"+from, "kubeadm")
	server := filepath.Join(outputDir(), "bin", "kube-apiserver-"+from, "kube-apiserver")
	for _, b := range []string{kubeadm, server} {
		if _, err := os.Stat(b); err != nil {
			if os.Getenv("PEERDISCOVERY_KUBEADM_REQUIRED") != "" {
				t.Fatalf("%v (hack/build-kube-node.sh builds kubeadm with KUBE_NODE_COMPONENTS=kubeadm; hack/build-kube-apiserver.sh the filter build)", err)
			}
			t.Skipf("%v: build it (hack/test.sh does and sets PEERDISCOVERY_KUBEADM_REQUIRED)", err)
		}
	}
	dir := t.TempDir()
	patches := filepath.Join(dir, "patches")
	if err := os.Mkdir(patches, 0o755); err != nil {
		t.Fatal(err)
	}
	// The docs' placeholders as kubeadm would get them, and the patch
	// directory here.
	cfg := docBlock(t, "kind: InitConfiguration")
	cfg = strings.ReplaceAll(cfg, "<kubeadm certs certificate-key>", strings.Repeat("a", 64))
	cfg = strings.ReplaceAll(cfg, "directory: /etc/kubernetes/patches", "directory: "+patches)
	if err := os.WriteFile(filepath.Join(dir, "init.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, marker := range map[string]string{
		"kube-apiserver0+json.yaml": "kube-apiserver-peerdiscovery:" + from,
		"etcd0+json.yaml":           "path: /metadata/uid",
	} {
		if err := os.WriteFile(filepath.Join(patches, file), []byte(docBlock(t, marker)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "manifests")
	args := append(append([]string{"init", "phase"}, phase...), "--config", filepath.Join(dir, "init.yaml"), "--dry-run")
	cmd := exec.Command(kubeadm, args...)
	cmd.Env = append(os.Environ(), "KUBEADM_INIT_DRYRUN_DIR="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubeadm %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, component+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	return pod
}
