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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

func restHTTPClient(cfg *rest.Config) (*http.Client, error) { return rest.HTTPClientFor(cfg) }

// serverVersion is /version's gitVersion.
func serverVersion(ctx context.Context, client *http.Client, host string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("/version: %w", err)
	}
	return v.GitVersion, nil
}

// imageIndex is hack/build-images.sh's images.json.
type imageIndex []struct {
	Ref     string `json:"ref"`
	Archive string `json:"archive"`
}

// ExtensionImage is the peerdiscovery-apiserver image of this checkout
// (hack/build-images.sh names it after /VERSION).
func (c *Config) ExtensionImage() (string, error) {
	b, err := os.ReadFile(filepath.Join(c.RepoRoot, "VERSION"))
	if err != nil {
		return "", err
	}
	return ImageRegistry + "/peerdiscovery-apiserver:" + strings.TrimSpace(string(b)), nil
}

// nodeImages are the images every node imports, by reference.
func (c *Config) nodeImages() ([]string, error) {
	ext, err := c.ExtensionImage()
	if err != nil {
		return nil, err
	}
	refs := []string{PauseImage, ext, kubeImage("kube-scheduler", c.Nodes.Version)}
	if !c.ControllerManager.Disabled {
		refs = append(refs, kubeImage("kube-controller-manager", c.ControllerManager.Version))
	}
	for _, v := range c.kubeAPIServerImageVersions() {
		refs = append(refs, KubeAPIServerImage(v))
	}
	return refs, nil
}

// kubeAPIServerImageVersions are the servers' releases and the upgrade
// targets, once each.
func (c *Config) kubeAPIServerImageVersions() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range append(serverVersions(c.Servers), c.Nodes.UpgradeVersions...) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// versionLess reports whether release a is older than b (both valid).
func versionLess(a, b string) bool {
	return utilversion.MustParseSemantic(a).LessThan(utilversion.MustParseSemantic(b))
}

func serverVersions(specs []ServerSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Version)
	}
	return out
}

// completeNodes fills in the node-based plane's defaults and rejects what
// it cannot run.
func (c *Config) completeNodes() error {
	n := &c.Nodes
	if !n.Enabled {
		return nil
	}
	oldest := ""
	for i, s := range c.Servers {
		if s.Binary != "" {
			return fmt.Errorf("server %d: Binary cannot be set on the node-based plane (it runs images)", i)
		}
		if s.OmitPeerFlags {
			return fmt.Errorf("server %d: OmitPeerFlags is not supported on the node-based plane", i)
		}
		if oldest == "" || versionLess(s.Version, oldest) {
			oldest = s.Version
		}
	}
	if n.Version == "" {
		n.Version = oldest
	}
	if n.Overlay == "" {
		n.Overlay = filepath.Join(c.RepoRoot, "artifacts", "deploy", "overlays", "ha")
	}
	if c.ControllerManager.Binary != "" {
		return fmt.Errorf("ControllerManager.Binary cannot be set on the node-based plane (it runs an image)")
	}
	if c.ControllerManager.Server != 0 {
		return fmt.Errorf("ControllerManager.Server must be 0 on the node-based plane (a static pod on node-0)")
	}
	if c.ControllerManager.Version == "" {
		c.ControllerManager.Version = n.Version
	}
	// Every controller, as kubeadm runs it: Deployments, EndpointSlices,
	// PodDisruptionBudgets, Nodes.
	if len(c.ControllerManager.Controllers) == 0 {
		c.ControllerManager.Controllers = []string{"*"}
	}
	// Images imported on every node, a Deployment rolled out: slower
	// than processes.
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultNodesStartTimeout
	}
	// The extension runs as the manifests' Deployment, not as processes.
	c.ExtensionReplicas = -1
	if c.ExtensionDirect {
		return fmt.Errorf("ExtensionDirect is not supported on the node-based plane (the extension runs as a Deployment)")
	}
	return nil
}

// resolveNodeBinaries builds the images (hack/build-images.sh builds the
// binaries they need) and the node binaries, and finds the archives.
func (c *Config) resolveNodeBinaries(ctx context.Context, b *binaries) (*nodePlane, error) {
	versions := c.kubeAPIServerImageVersions()
	c.Logf("building the images (hack/build-images.sh --kube-versions %q)", strings.Join(versions, " "))
	if err := c.runBuild(ctx, "the images", filepath.Join(c.RepoRoot, "hack", "build-images.sh"), "--kube-versions", strings.Join(versions, " ")); err != nil {
		return nil, err
	}
	np := &nodePlane{
		spec:       c.Nodes,
		images:     map[string]string{},
		kubeletBin: filepath.Join(c.binDir(), "kubelet-"+c.Nodes.Version, "kubelet"),
		proxyBin:   filepath.Join(c.binDir(), "kube-proxy-"+c.Nodes.Version, "kube-proxy"),
	}
	if _, err := os.Stat(np.kubeletBin); err != nil {
		if err := c.runBuild(ctx, "kubelet "+c.Nodes.Version, filepath.Join(c.RepoRoot, "hack", "build-kube-node.sh"), c.Nodes.Version); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(c.OutputDir, "images")
	data, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the images' index: %w", err)
	}
	var idx imageIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "images.json"), err)
	}
	archives := map[string]string{}
	for _, e := range idx {
		archives[e.Ref] = filepath.Join(dir, e.Archive)
	}
	refs, err := c.nodeImages()
	if err != nil {
		return nil, err
	}
	for _, ref := range refs {
		a, ok := archives[ref]
		if !ok {
			return nil, fmt.Errorf("hack/build-images.sh wrote no image %s", ref)
		}
		np.images[ref] = a
	}
	for _, tool := range []string{"containerd", "runc", "ctr", "nsenter", "iptables-restore", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/usr/lib/cni/portmap"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the node-based plane needs %s (apt-get install containerd runc containernetworking-plugins iptables; hack/install-test-deps.sh --nodes): %w", tool, err)
		}
	}
	return np, nil
}

// startNodePlane starts the nodes with the kube-apiservers, kube-proxy,
// the control-plane static pods, and installs the extension.
func (c *Cluster) startNodePlane(ctx context.Context) error {
	if err := c.startNodes(ctx); err != nil {
		return err
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	if err := c.startKubeProxy(); err != nil {
		return err
	}
	for _, pod := range c.controlPlanePods(c.nodes.nodes[controlNode]) {
		if err := c.writeStaticPod(c.nodes.nodes[controlNode], pod); err != nil {
			return err
		}
	}
	if err := c.waitNodesReady(ctx); err != nil {
		return err
	}
	return c.installExtension(ctx)
}

// startKubeProxy runs kube-proxy (iptables) for the cluster's network
// namespace: the nodes share it, so one kube-proxy serves every node's
// Pods (three would race over one set of chains). It runs as a process
// with the host's iptables; an image would need iptables and its
// libraries.
func (c *Cluster) startKubeProxy() error {
	n := c.nodes.nodes[controlNode]
	kp, err := c.pki.ca.NewClientCert("system:kube-proxy", nil)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.runDir, "kube-proxy.conf")
	if err := writeCertKubeconfig(kubeconfig, c.endpoint(c.servers[controlNode]), "system:kube-proxy", c.pki.ca.CertPEM, kp); err != nil {
		return err
	}
	ip := n.ip.String()
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride":   n.name,
		"bindAddress":        ip,
		"healthzBindAddress": ip + ":10256",
		"metricsBindAddress": ip + ":10249",
		"mode":               "iptables",
		"clusterCIDR":        podSubnetPrefix + "0.0/16",
		// Host-wide sysctls: leave them as they are.
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(c.runDir, "kube-proxy.yaml")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		return err
	}
	c.nodes.proxy = &process{name: "kube-proxy", logPath: c.logPath("kube-proxy"),
		argv: c.nsArgv("", c.nodes.proxyBin, "--config="+cfgFile, "--v=2")}
	c.cfg.Logf("starting kube-proxy %s (iptables) in %s", c.nodes.spec.Version, c.net.Name)
	return c.nodes.proxy.start()
}

// ExtensionOverlayDir is the kustomization the node-based plane installs
// the extension from: NodesSpec.Overlay with the image set to this
// checkout's.
func (c *Cluster) ExtensionOverlayDir() string { return filepath.Join(c.runDir, "deploy") }

// installExtension installs peerdiscovery-apiserver as its users do:
// `kubectl apply -k` of an overlay that sets only the image, then
// hack/deploy-certs.sh (the serving certificate's Secret and the
// APIService's caBundle), and waits for the Deployment to roll out and
// the APIService to be Available through every kube-apiserver.
func (c *Cluster) installExtension(ctx context.Context) error {
	img, err := c.cfg.ExtensionImage()
	if err != nil {
		return err
	}
	i := strings.LastIndex(img, ":")
	dir := c.ExtensionOverlayDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, c.nodes.spec.Overlay)
	if err != nil {
		return err
	}
	kust := fmt.Sprintf(`# Generated by internal/localcluster: %s with this checkout's image.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: %s/peerdiscovery-apiserver
  newName: %s
  newTag: %s
`, c.nodes.spec.Overlay, rel, ImageRegistry, img[:i], img[i+1:])
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return err
	}
	c.cfg.Logf("kubectl apply -k %s", dir)
	if out, err := c.KubectlContext(ctx, "apply", "-k", dir); err != nil {
		return err
	} else {
		c.cfg.Logf("%s", strings.TrimSpace(out))
	}
	c.cfg.Logf("hack/deploy-certs.sh")
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.RepoRoot, "hack", "deploy-certs.sh"),
		"--kubeconfig", c.kubeconfig, "--dir", filepath.Join(c.runDir, "deploy-certs"))
	cmd.Env = append(os.Environ(), "KUBECTL="+c.bins.kubectl, "PEERDISCOVERY_OUTPUT_DIR="+c.cfg.OutputDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/deploy-certs.sh: %w\n%s", err, out)
	}
	start := time.Now()
	if _, err := c.KubectlContext(ctx, "rollout", "status", "--namespace", ExtensionNamespace, "deployment/"+ExtensionDeployment, "--timeout=5m"); err != nil {
		pods, _ := c.KubectlContext(context.Background(), "get", "pods", "-A", "-o", "wide")
		return fmt.Errorf("%w\n%s", err, pods)
	}
	c.cfg.Logf("Deployment %s/%s rolled out in %s", ExtensionNamespace, ExtensionDeployment, time.Since(start).Round(100*time.Millisecond))
	return c.WaitExtensionAvailable(ctx)
}

// DefaultNodesStartTimeout is Config.StartTimeout's default on the
// node-based plane.
const DefaultNodesStartTimeout = 12 * time.Minute

// ExtensionDeployment is the Deployment of artifacts/deploy/base.
const ExtensionDeployment = "peerdiscovery-apiserver"
