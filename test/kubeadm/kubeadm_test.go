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

// Package kubeadm tests the control plane as admins make and upgrade it:
// hack/kubeadm-plane.sh runs kubeadm init, kubeadm join --control-plane
// and, per node, kubeadm upgrade apply|node with the kubelet's restart, on
// three "machines" of this host; these tests check what came out, and
// run the upgrade drill's workload through every server during the
// upgrade.
package kubeadm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

const (
	nodes = 3
	// octet is the plane's 10.254.<octet>.0/24 (KUBEADM_OCTET).
	octet = "88"
	from  = "v1.36.3"
	to    = "v1.37.2"
	// filterImage is the filter build's image name, as
	// docs/operations.md patches it in.
	filterImage = "registry.example.com/kube-apiserver-peerdiscovery:"
)

var (
	repoRoot  string
	planeDir  string // _output/kubeadm/<run>
	adminFile string
	upgrade   bool
	// routing is PEERDISCOVERY_ROUTING: "peerdiscovery" (default), or
	// "upstream" for the same plane with kubeadm's own kube-apiserver
	// image (upstream's built-in proxy), reported beside ours, not held to
	// the bar.
	routing string
)

// TestMain brings the plane up with hack/kubeadm-plane.sh up (the
// command hack/local-up.sh --kubeadm runs) and removes it at the end.
// PEERDISCOVERY_KUBEADM=1 runs the plane's checks; =upgrade also rolls it
// to the newer release under load (hack/kubeadm-upgrade.sh). Both on
// demand: without it only the plane-free tests run (the test command's
// shorter form).
func TestMain(m *testing.M) {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	repoRoot = filepath.Join(wd, "..", "..")
	mode := os.Getenv("PEERDISCOVERY_KUBEADM")
	if mode == "" {
		// The plane-free tests only (TestDocsConfigRendersTheFilter).
		os.Exit(m.Run())
	}
	upgrade = mode == "upgrade"
	routing = os.Getenv("PEERDISCOVERY_ROUTING")
	if routing == "" {
		routing = "peerdiscovery"
	}
	if err := plane("up", "--version", from, "--routing", routing); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = plane("down")
		os.Exit(1)
	}
	planeDir, err = filepath.EvalSymlinks(filepath.Join(outputDir(), "kubeadm", "current"))
	if err == nil {
		adminFile = filepath.Join(planeDir, "kubeconfig")
	}
	code := m.Run()
	if err := plane("down"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func outputDir() string {
	if d := os.Getenv("PEERDISCOVERY_OUTPUT_DIR"); d != "" {
		return d
	}
	return filepath.Join(repoRoot, "_output")
}

// plane runs hack/kubeadm-plane.sh with args, its output to the test's.
func plane(args ...string) error {
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "kubeadm-plane.sh"), args...)
	cmd.Env = append(os.Environ(), "KUBEADM_OCTET="+octet)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/kubeadm-plane.sh %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func needPlane(t *testing.T) {
	if planeDir == "" {
		t.Skip("the kubeadm plane needs root, kubeadm and its images: PEERDISCOVERY_KUBEADM=1 (hack/local-up.sh --kubeadm's plane; =upgrade: hack/kubeadm-upgrade.sh)")
	}
}

func nodeIP(i int) string { return fmt.Sprintf("10.254.%s.%d", octet, 10+i) }

// serverConfig is the admin's config for node i's kube-apiserver (i < 0:
// the control-plane endpoint, haproxy).
func serverConfig(t testing.TB, i int) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", adminFile)
	if err != nil {
		t.Fatal(err)
	}
	if i >= 0 {
		cfg.Host = "https://" + nodeIP(i) + ":6443"
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

// TestPlaneMadeByKubeadm: three Ready control-plane nodes, each with the
// static Pods kubeadm writes (stacked etcd), kube-apiserver from the
// filter build with the filter on, and the APIService Available through
// every server.
func TestPlaneMadeByKubeadm(t *testing.T) {
	needPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	checkPlane(ctx, t, from)
	if routing != "peerdiscovery" {
		return
	}
	// docs/operations.md, section 3: what kubeadm was given, and the
	// commands that made the plane.
	checkDocsHaveFiles(t, 0, "kubeadm/init.yaml", "patches/kube-apiserver0+json.yaml", "patches/etcd0+json.yaml")
	checkDocsHaveFiles(t, 1, "kubeadm/join.yaml", "patches/etcd0+json.yaml")
	checkDocsHaveCommands(t)
}

func checkPlane(ctx context.Context, t *testing.T, version string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(serverConfig(t, -1))
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, n := range nl.Items {
		if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; !cp {
			t.Errorf("node %s is not a control-plane node", n.Name)
		}
		if n.Status.NodeInfo.KubeletVersion != version {
			t.Errorf("node %s: kubelet %s, want %s", n.Name, n.Status.NodeInfo.KubeletVersion, version)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if len(nl.Items) != nodes || ready != nodes {
		t.Errorf("%d nodes, %d Ready; want %d Ready", len(nl.Items), ready, nodes)
	}
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	static := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		// Mirror Pods: the kubelet's copies of the manifests kubeadm wrote.
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			static[p.Name] = p
		}
	}
	for i := range nodes {
		for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			name := fmt.Sprintf("%s-node-%d", c, i)
			p, ok := static[name]
			if !ok {
				t.Errorf("no static Pod %s", name)
				continue
			}
			if p.Status.Phase != corev1.PodRunning {
				t.Errorf("%s is %s", name, p.Status.Phase)
			}
			if c == "kube-apiserver" {
				want := filterImage + version
				if routing == "upstream" {
					want = "registry.k8s.io/kube-apiserver:" + version
				}
				if img := p.Spec.Containers[0].Image; img != want {
					t.Errorf("%s runs %s, want %s", name, img, want)
				}
				if ep := p.Annotations["kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"]; ep != nodeIP(i)+":6443" {
					t.Errorf("%s advertises %q, want %s:6443", name, ep, nodeIP(i))
				}
			}
		}
	}
	if routing == "upstream" {
		return // no peerdiscovery-apiserver, no filter
	}
	for i := range nodes {
		cfg := serverConfig(t, i)
		ag := aggregatorclient.NewForConfigOrDie(cfg)
		as, err := ag.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.peerdiscovery.k8s.io", metav1.GetOptions{})
		if err != nil {
			t.Errorf("kube-apiserver on node-%d: %v", i, err)
			continue
		}
		available := false
		for _, c := range as.Status.Conditions {
			available = available || (c.Type == "Available" && c.Status == "True")
		}
		if !available {
			t.Errorf("kube-apiserver on node-%d: APIService not Available: %+v", i, as.Status.Conditions)
		}
		metrics, err := kubernetes.NewForConfigOrDie(cfg).RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Errorf("kube-apiserver on node-%d: /metrics: %v", i, err)
		} else if !bytes.Contains(metrics, []byte("\npeerdiscovery_filter_enabled 1\n")) {
			t.Errorf("kube-apiserver on node-%d: the filter is not enabled (peerdiscovery_filter_enabled)", i)
		}
	}
}

// etcdContainers maps each node to the container its etcd mirror Pod
// reports: the roll keeps etcd running (its static Pod has a UID of its
// own, docs/operations.md section 3), so these must not change.
func etcdContainers(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(serverConfig(t, -1))
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=etcd"})
	if err != nil {
		t.Fatalf("etcd Pods: %v", err)
	}
	ids := map[string]string{}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			// Without an ID (not started yet) the comparison would prove
			// nothing: such a node counts as missing.
			if c.Name == "etcd" && c.ContainerID != "" {
				ids[p.Spec.NodeName] = c.ContainerID
			}
		}
	}
	if len(ids) != nodes {
		t.Fatalf("etcd containers on %d nodes, want %d: %v", len(ids), nodes, ids)
	}
	return ids
}
