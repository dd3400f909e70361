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

package nodeplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/test/planetest"
	"sigs.k8s.io/peerdiscovery/test/upgradedrill"
	"sigs.k8s.io/peerdiscovery/test/workload"
)

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real node-based plane")
	}
}

// kubectl runs kubectl v1.37.2 against the plane and fails the test on
// error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := cluster.KubectlContext(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryKubectl is kubectl returning its error (inside a WaitFor).
func tryKubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return cluster.KubectlContext(ctx, args...)
}

func podList(args ...string) (corev1.PodList, error) {
	var pods corev1.PodList
	out, err := tryKubectl(append([]string{"get", "pods", "-o", "json"}, args...)...)
	if err != nil {
		return pods, err
	}
	return pods, json.Unmarshal([]byte(out), &pods)
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkStaticPods: every kube-apiserver is a static pod of its node, of
// the release the server reports, shown as a Running, Ready mirror pod in
// kube-system, with kube-controller-manager and kube-scheduler on node-0.
func checkStaticPods(t *testing.T) {
	t.Helper()
	t.Logf("kubectl get pods -A -o wide:\n%s", kubectl(t, "get", "pods", "-A", "-o", "wide"))
	// Mirror pods follow the kubelets' status updates.
	planetest.WaitFor(t, 2*time.Minute, "the static pods' mirror pods Running and Ready", func() error {
		pods, err := podList("-n", "kube-system")
		if err != nil {
			return err
		}
		byName := map[string]corev1.Pod{}
		for _, p := range pods.Items {
			byName[p.Name] = p
		}
		var errs []error
		for i, s := range cluster.Servers() {
			node := fmt.Sprintf("node-%d", i)
			p, ok := byName["kube-apiserver-"+node]
			if !ok {
				errs = append(errs, fmt.Errorf("no mirror pod kube-apiserver-%s in kube-system", node))
				continue
			}
			if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; !mirror {
				errs = append(errs, fmt.Errorf("%s is not a mirror pod", p.Name))
			}
			if p.Spec.NodeName != node || !p.Spec.HostNetwork || p.Status.Phase != corev1.PodRunning || !podReady(p) {
				errs = append(errs, fmt.Errorf("%s: node %s, hostNetwork %v, phase %s, ready %v", p.Name, p.Spec.NodeName, p.Spec.HostNetwork, p.Status.Phase, podReady(p)))
			}
			if img := p.Spec.Containers[0].Image; img != localcluster.KubeAPIServerImage(s.Version) {
				errs = append(errs, fmt.Errorf("%s runs %s, want %s", p.Name, img, localcluster.KubeAPIServerImage(s.Version)))
			}
		}
		for _, name := range []string{"kube-controller-manager-node-0", "kube-scheduler-node-0"} {
			if p, ok := byName[name]; !ok || p.Status.Phase != corev1.PodRunning {
				errs = append(errs, fmt.Errorf("mirror pod %s missing or not Running", name))
			}
		}
		return errors.Join(errs...)
	})
	for i, s := range cluster.Servers() {
		code, _, body := planetest.Get(t, cluster.AdminConfig(i), "/readyz?verbose")
		if code != 200 || !strings.Contains(string(body), "[+]peerdiscovery-filter ok") {
			t.Errorf("%s /readyz: %d, the filter's check missing:\n%s", s.Name, code, body)
		}
		code, _, body = planetest.Get(t, cluster.AdminConfig(i), "/version")
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := json.Unmarshal(body, &v); code != 200 || err != nil || v.GitVersion != s.Version {
			t.Errorf("%s /version: %d %s, want %s", s.Name, code, body, s.Version)
		}
	}
}

// TestStaticPods: the kube-apiservers are static pods with the filter in
// their image; each node's own hostname gives each server its own
// identity.
func TestStaticPods(t *testing.T) {
	needCluster(t)
	checkStaticPods(t)
	t.Logf("kubectl get nodes -o wide:\n%s", kubectl(t, "get", "nodes", "-o", "wide"))
	var nodes corev1.NodeList
	if err := json.Unmarshal([]byte(kubectl(t, "get", "nodes", "-o", "json")), &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != len(cluster.Servers()) {
		t.Errorf("%d Nodes, want %d", len(nodes.Items), len(cluster.Servers()))
	}
	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != from || !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
			t.Errorf("Node %s: kubelet %s, runtime %s", n.Name, n.Status.NodeInfo.KubeletVersion, n.Status.NodeInfo.ContainerRuntimeVersion)
		}
	}
	// Every kubelet binds its device plugin socket in its own node's
	// folder: one bound on the host (--root-dir does not move it) means
	// the three kubelets race for it and one exits.
	if fi, err := os.Stat("/var/lib/kubelet/device-plugins/kubelet.sock"); err == nil && !fi.ModTime().Before(planeStart) {
		t.Errorf("a kubelet bound /var/lib/kubelet/device-plugins/kubelet.sock on the host at %s", fi.ModTime().Format(time.RFC3339))
	}
	// One identity Lease per server, named from its node's hostname.
	out := kubectl(t, "get", "leases", "-n", "kube-system", "-l", "apiserver.kubernetes.io/identity=kube-apiserver",
		"-o", `jsonpath={range .items[*]}{.metadata.labels.kubernetes\.io/hostname}{"\n"}{end}`)
	hosts := sets.New(strings.Fields(out)...)
	if want := sets.New("node-0", "node-1", "node-2"); !hosts.Equal(want) {
		t.Errorf("identity Leases' hostnames %v, want %v", sets.List(hosts), sets.List(want))
	}
}

// TestWatchListThroughEveryServer: a watch-list (sendInitialEvents, what
// client-go's informers ask first) of each peerdiscovery resource through
// every kube-apiserver gets the initial state and its end bookmark. The
// image's binary once refused it (422): its stamped version v0.1.0 made
// k8s.io/apiserver emulate Kubernetes 0.1, WatchList off, and the filters'
// informers fell back to a LIST and a WATCH that the aggregator may send to
// different replicas (410 and client-go's backoff: a view up to 30 s old).
func TestWatchListThroughEveryServer(t *testing.T) {
	needCluster(t)
	for i, s := range cluster.Servers() {
		cs, err := versioned.NewForConfig(cluster.AdminConfig(i))
		if err != nil {
			t.Fatal(err)
		}
		pd := cs.PeerdiscoveryV1alpha1()
		for _, r := range []struct {
			resource string
			watch    func(context.Context, metav1.ListOptions) (watch.Interface, error)
		}{
			{"peerroutingtables", pd.PeerRoutingTables().Watch},
			{"apiserverpeers", pd.APIServerPeers().Watch},
			{"peeraggregateddiscoveries", pd.PeerAggregatedDiscoveries().Watch},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			w, err := r.watch(ctx, metav1.ListOptions{
				SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			})
			if err != nil {
				cancel()
				t.Errorf("watch-list of %s through %s: %v", r.resource, s.Name, err)
				continue
			}
			added, ended := 0, false
			for ev := range w.ResultChan() {
				if ev.Type == watch.Added {
					added++
					continue
				}
				if m, err := meta.Accessor(ev.Object); ev.Type == watch.Bookmark && err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					ended = true
				}
				break
			}
			w.Stop()
			cancel()
			if !ended || added == 0 {
				t.Errorf("watch-list of %s through %s: %d objects, initial-events-end bookmark %v", r.resource, s.Name, added, ended)
			}
		}
	}
}

// readmeExamples runs the README's kubectl examples through server i;
// mixed adds those that need a v1.37 server beside a v1.36 one.
func readmeExamples(t *testing.T, i int, mixed bool) {
	t.Helper()
	s := cluster.Servers()[i]
	ctx := "--context=" + s.Context
	kubectl(t, ctx, "get", "peerroutingtables", "--field-selector", "status.servedByAll=false")
	peers := kubectl(t, ctx, "get", "apiserverpeers", "-o", "jsonpath={.items[*].metadata.name}")
	if n := len(strings.Fields(peers)); n != len(cluster.Servers()) {
		t.Errorf("through %s: %d apiserverpeers (%s), want %d", s.Name, n, peers, len(cluster.Servers()))
	}
	kubectl(t, ctx, "get", "peerdiscovery")
	kubectl(t, ctx, "get", "--raw", "/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries/cluster")
	review := filepath.Join(t.TempDir(), "review.yaml")
	source := strings.Fields(peers)[0]
	if err := os.WriteFile(review, []byte(fmt.Sprintf("apiVersion: peerdiscovery.k8s.io/v1alpha1\nkind: RouteReview\nspec: {verb: get, path: /apis/resource.k8s.io/v1/deviceclasses, sourcePeer: %s}\n", source)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := kubectl(t, ctx, "create", "-o", "yaml", "-f", review); !strings.Contains(out, "status:") {
		t.Errorf("through %s: RouteReview without a status:\n%s", s.Name, out)
	}
	if mixed {
		kubectl(t, ctx, "get", "--raw", "/apis/storagemigration.k8s.io/v1")
		kubectl(t, ctx, "explain", "storageversionmigrations.spec")
	}
}

// TestReadmeExamples: the README's kubectl examples through every server.
func TestReadmeExamples(t *testing.T) {
	needCluster(t)
	for i := range cluster.Servers() {
		readmeExamples(t, i, false)
	}
}

// TestUpgrade is the kubeadm-style upgrade: each step swaps a node's
// kube-apiserver manifest for v1.37.2's and waits for the kubelet to
// replace the pod; after the first, the README's examples through every
// server of the mixed plane and a rollout restart of the extension; the
// upgrade drill's workload all along. Required, as the upgrade drill
// requires: no false 404, no operation failed after client-go's retries
// (each reported with its cause), no lost or duplicated write, informers
// equal to the final list.
func TestUpgrade(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), plan.MaxDuration+10*time.Minute)
	defer cancel()
	var restart time.Duration
	res, err := upgradedrill.RunWith(ctx, cluster, localcluster.RoutingPeerDiscovery, plan, upgradedrill.Options{
		Steps: steps,
		Roll: func(ctx context.Context, step upgradedrill.Step, exited func()) error {
			_, err := cluster.UpgradeStaticPod(ctx, step.Server, step.Version, exited)
			return err
		},
		AfterStep: func(ctx context.Context, i int) error {
			if i != 0 {
				return nil
			}
			// The upgraded server's aggregator fetches the extension's
			// discovery on its own schedule: kubectl needs that first.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := cluster.WaitExtensionAvailable(wctx)
			cancel()
			if err != nil {
				return err
			}
			for j := range cluster.Servers() {
				readmeExamples(t, j, true)
			}
			start := time.Now()
			if _, err := cluster.KubectlContext(ctx, "rollout", "restart", "-n", localcluster.ExtensionNamespace, "deployment/"+localcluster.ExtensionDeployment); err != nil {
				return err
			}
			if _, err := cluster.KubectlContext(ctx, "rollout", "status", "-n", localcluster.ExtensionNamespace, "deployment/"+localcluster.ExtensionDeployment, "--timeout=5m"); err != nil {
				return err
			}
			restart = time.Since(start)
			t.Logf("rollout restart of the extension: %s", restart.Round(100*time.Millisecond))
			return nil
		},
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	report := upgradedrill.Markdown(res)
	t.Logf("upgrade on the nodes (%s):\n%s", mode, report)
	dir := filepath.Join(cluster.OutputDir(), "nodeplane")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		data, _ := json.Marshal(res)
		_ = os.WriteFile(filepath.Join(dir, "upgrade-"+mode+".json"), data, 0o644)
		_ = os.WriteFile(filepath.Join(dir, "upgrade-"+mode+".md"), []byte(report), 0o644)
	}
	_, total := upgradedrill.Summarize(res)
	t.Logf("writes: %s", res.Writes)
	if total.Ops < plan.Rate*int(plan.Warmup.Seconds()) {
		t.Errorf("only %d operations: the workload did not run", total.Ops)
	}
	if total.NotFound != 0 {
		t.Errorf("%d false 404s", total.NotFound)
	}
	if !res.Writes.OK() {
		t.Errorf("writes: %s", res.Writes)
	}
	if e, n := res.InformersEqual(); e != n {
		t.Errorf("informers equal to the final quorum list: %d of %d: %+v", e, n, res.Informers)
	}
	// Errors left after client-go's retries, by cause.
	type cause struct {
		verb, kind string
		code       int
		reason     string
	}
	causes := map[cause][]workload.Sample{}
	var order []cause
	for _, s := range res.Samples {
		if s.Code == 200 {
			continue
		}
		reason := s.Err
		if i := strings.Index(reason, ": "); i >= 0 && s.Code == 409 {
			reason = reason[i+2:] // the object's name first: the same cause
		}
		c := cause{s.Verb, s.Kind, s.Code, reason}
		if _, ok := causes[c]; !ok {
			order = append(order, c)
		}
		causes[c] = append(causes[c], s)
	}
	for _, c := range order {
		first := causes[c][0]
		t.Errorf("failed after client-go's retries: %d × %s %s: %d %s (first at %.1fs on kube-apiserver-%d: %s)",
			len(causes[c]), c.verb, c.kind, c.code, c.reason, first.At.Seconds(), first.Server, first.Err)
	}
	if restart == 0 {
		t.Error("the extension's rollout restart did not run")
	}
	// The plane after the upgrade.
	checkStaticPods(t)
	checkExtension(t)
}
