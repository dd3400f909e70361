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

package controllers

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// svm is served by v1.37.2 only (a v1.37 kind, cluster-scoped).
var svm = schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}

// How long "stays" is watched, and how long the controllers may take.
const (
	observe = 20 * time.Second
	outage  = 30 * time.Second
)

// converged bounds how long the controllers may take; measuring other
// routings, where some rows never converge, it is shorter (peerdiscovery's
// slowest here: 22s). A function: TestMain sets routing.
func converged() time.Duration {
	if routing == localcluster.RoutingPeerDiscovery {
		return 3 * time.Minute
	}
	return 90 * time.Second
}

func kube(t *testing.T, i int) kubernetes.Interface {
	t.Helper()
	return planetest.Kube(t, cluster.AdminConfig(i))
}

func dyn(t *testing.T, i int) dynamic.Interface {
	t.Helper()
	return planetest.Dynamic(t, cluster.AdminConfig(i))
}

// TestControllers runs the scenarios in order on one control plane; the
// outage ones stop and restart the only capable server.
func TestControllers(t *testing.T) {
	needCluster(t)
	if v, i := cluster.ControllerManagerVersion(); i != old {
		t.Fatalf("kube-controller-manager %s talks to server %d, want %d", v, i, old)
	}
	steps := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"GCOwnerOnlyOnPeer", testGCOwnerOnlyOnPeer},
		{"GCDependentOnlyOnPeer", testGCDependentOnlyOnPeer},
		{"GCClusterScopedOwnerOnlyOnPeer", testGCClusterScopedOwner},
		{"NamespaceDeletion", func(t *testing.T) { testNamespaceDeletion(t, "ns-plain", 0, false) }},
		{"NamespaceDeletionWhileCapableStopped", func(t *testing.T) { testNamespaceDeletion(t, "ns-sigterm", syscall.SIGTERM, false) }},
		{"NamespaceDeletionWhileCapableKilled", func(t *testing.T) { testNamespaceDeletion(t, "ns-sigkill", syscall.SIGKILL, false) }},
		{"NamespaceDeletionWhileCapableKilledAndReplicasRestarted", func(t *testing.T) { testNamespaceDeletion(t, "ns-sigkill-replicas", syscall.SIGKILL, true) }},
		{"GCWhileCapableStopped", func(t *testing.T) { testGCDuringOutage(t, "gc-sigterm", syscall.SIGTERM) }},
		{"GCWhileCapableKilled", func(t *testing.T) { testGCDuringOutage(t, "gc-sigkill", syscall.SIGKILL) }},
		{"GCDependentOnPeerWhileCapableStopped", func(t *testing.T) { testGCDependentDuringOutage(t, "gcd-sigterm", syscall.SIGTERM) }},
		{"GCDependentOnPeerWhileCapableKilled", func(t *testing.T) { testGCDependentDuringOutage(t, "gcd-sigkill", syscall.SIGKILL) }},
	}
	var table []string
	for _, s := range steps {
		ok := t.Run(s.name, s.fn)
		table = append(table, fmt.Sprintf("%-40s %v", s.name, map[bool]string{true: "held", false: "FAILED"}[ok]))
		// Measuring upstream, every row is run; with peerdiscovery, a
		// failure stops the run (later steps assume a clean cluster).
		if !ok && routing == localcluster.RoutingPeerDiscovery {
			t.Fatalf("%s failed; later steps depend on the cluster state", s.name)
		}
	}
	t.Logf("routing %q:\n%s", routing, strings.Join(table, "\n"))
}

// stopCapable stops the only capable server with sig and makes sure it is
// started again when the test ends, however it ends.
func stopCapable(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := cluster.StopAPIServer(capable, sig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.StartAPIServer(capable) })
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := kube(t, old).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// pdb creates a PodDisruptionBudget on the capable server (so the same
// way whatever routes requests), with owners.
func pdb(t *testing.T, ns, name string, owners ...metav1.OwnerReference) *policyv1.PodDisruptionBudget {
	t.Helper()
	one := intstr.FromInt32(1)
	p, err := kube(t, capable).PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating PDB %s/%s: %v", ns, name, err)
	}
	return p
}

func configMap(t *testing.T, ns, name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube(t, old).CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func ownerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid}
}

// exists reports whether get finds the object (errors other than 404 fail
// the test).
func exists(t *testing.T, get func() error) bool {
	t.Helper()
	err := get()
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// staysFor fails the test if get stops finding the object within d.
func staysFor(t *testing.T, d time.Duration, what string, get func() error) {
	t.Helper()
	if !stays(t, d, get) {
		t.Fatalf("%s was deleted, wrongly", what)
	}
}

// stays reports whether get keeps finding the object for d.
func stays(t *testing.T, d time.Duration, get func() error) bool {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Second) {
		if !exists(t, get) {
			return false
		}
	}
	return true
}

// goneWithin fails the test unless get stops finding the object within d.
func goneWithin(t *testing.T, d time.Duration, what string, get func() error) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, d, true, func(context.Context) (bool, error) {
		return !exists(t, get), nil
	})
	if err != nil {
		t.Fatalf("%s still there after %v", what, d)
	}
	return time.Since(start)
}

func getCM(t *testing.T, ns, name string) func() error {
	return func() error {
		_, err := kube(t, old).CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err
	}
}

// getPDB reads from the capable server directly.
func getPDB(t *testing.T, ns, name string) func() error {
	return func() error {
		_, err := kube(t, capable).PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), name, metav1.GetOptions{})
		return err
	}
}

// testGCOwnerOnlyOnPeer: a ConfigMap owned by a PDB (served by the peer
// only) is kept while the PDB lives and collected once it is deleted.
func testGCOwnerOnlyOnPeer(t *testing.T) {
	ns := "gc-owner-peer"
	createNamespace(t, ns)
	owner := pdb(t, ns, "owner")
	configMap(t, ns, "dependent", ownerRef("policy/v1", "PodDisruptionBudget", owner.Name, owner.UID))
	staysFor(t, observe, "the ConfigMap whose PDB owner exists", getCM(t, ns, "dependent"))
	if err := kube(t, capable).PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := goneWithin(t, converged(), "the ConfigMap whose PDB owner was deleted", getCM(t, ns, "dependent"))
	t.Logf("dependent collected %v after its owner was deleted", took.Round(time.Second))
}

// testGCDependentOnlyOnPeer: a PDB (served by the peer only) owned by a
// ConfigMap is kept while the ConfigMap lives and collected after.
func testGCDependentOnlyOnPeer(t *testing.T) {
	ns := "gc-dependent-peer"
	createNamespace(t, ns)
	owner := configMap(t, ns, "owner")
	pdb(t, ns, "dependent", ownerRef("v1", "ConfigMap", owner.Name, owner.UID))
	staysFor(t, observe, "the PDB whose ConfigMap owner exists", getPDB(t, ns, "dependent"))
	if err := kube(t, old).CoreV1().ConfigMaps(ns).Delete(context.Background(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := goneWithin(t, converged(), "the PDB whose ConfigMap owner was deleted", getPDB(t, ns, "dependent"))
	t.Logf("dependent collected %v after its owner was deleted", took.Round(time.Second))
}

// testGCClusterScopedOwner: a ConfigMap owned by a StorageVersionMigration
// (a v1.37 kind) follows its owner.
func testGCClusterScopedOwner(t *testing.T) {
	ns := "gc-svm-owner"
	createNamespace(t, ns)
	owner, err := dyn(t, capable).Resource(svm).Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
		"metadata": map[string]any{"name": "gc-owner"},
		"spec":     map[string]any{"resource": map[string]any{"group": "", "resource": "configmaps"}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a StorageVersionMigration: %v", err)
	}
	configMap(t, ns, "dependent", ownerRef("storagemigration.k8s.io/v1", "StorageVersionMigration", owner.GetName(), owner.GetUID()))
	staysFor(t, observe, "the ConfigMap whose StorageVersionMigration owner exists", getCM(t, ns, "dependent"))
	if err := dyn(t, capable).Resource(svm).Delete(context.Background(), owner.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	goneWithin(t, converged(), "the ConfigMap whose StorageVersionMigration owner was deleted", getCM(t, ns, "dependent"))
}

// testNamespaceDeletion deletes, through the old server, a namespace that
// holds a PDB (served by the peer only) and a ConfigMap; with sig, while
// the only capable server is stopped with it: the namespace then stays
// Terminating until the server is back. Nothing is left behind.
//
// With restartReplicas, every peerdiscovery-apiserver replica is killed
// and started again after the capable server died and before the
// namespace is deleted (the chaos soak's seed 4923 left ConfigMaps behind
// a namespace deleted in that window once): the namespace must wait for
// the capable server and then take every object with it, the PDB and the
// ConfigMap.
func testNamespaceDeletion(t *testing.T, ns string, sig syscall.Signal, restartReplicas bool) {
	ctx := context.Background()
	createNamespace(t, ns)
	pdb(t, ns, "budget")
	configMap(t, ns, "config")
	if sig != 0 {
		stopCapable(t, sig)
	}
	if restartReplicas {
		var all []int
		for i := range cluster.Extensions() {
			if err := cluster.KillExtension(i, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			all = append(all, i)
		}
		if err := cluster.RestartExtensions(ctx, all...); err != nil {
			t.Fatal(err)
		}
		logRoutingEvidence(t)
	}
	if err := kube(t, old).CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	getNS := func() error {
		_, err := kube(t, old).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	}
	orphans := func() int {
		list, err := kube(t, capable).PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.namespace=" + ns})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	if sig != 0 {
		held := stays(t, outage, getNS)
		if held {
			n, err := kube(t, old).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after %v: namespace %s, conditions %s", outage, n.Status.Phase, conditions(n))
		}
		if err := cluster.StartAPIServer(capable); err != nil {
			t.Fatal(err)
		}
		if !held {
			logRoutingEvidence(t)
			t.Fatalf("namespace %s was deleted while its PDB's only server was down, wrongly: %d PDBs left behind", ns, orphans())
		}
	}
	took := goneWithin(t, converged(), "the namespace", getNS)
	if n := orphans(); n != 0 {
		t.Fatalf("namespace %s is gone but left %d PDBs behind", ns, n)
	}
	cms, err := kube(t, old).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != 0 {
		t.Fatalf("namespace %s is gone but left %d ConfigMaps behind", ns, len(cms.Items))
	}
	t.Logf("namespace %s gone %v after the capable server was back (or the delete), 0 PDBs left", ns, took.Round(time.Second))
}

func conditions(n *corev1.Namespace) string {
	var s string
	for _, c := range n.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			s += fmt.Sprintf("[%s: %.120s] ", c.Type, c.Message)
		}
	}
	return s
}

// testGCDuringOutage: while the only server of its PDB owner is stopped
// with sig, the garbage collector keeps the dependent ConfigMap; after, it
// still follows the owner.
func testGCDuringOutage(t *testing.T, ns string, sig syscall.Signal) {
	createNamespace(t, ns)
	owner := pdb(t, ns, "owner")
	configMap(t, ns, "dependent", ownerRef("policy/v1", "PodDisruptionBudget", owner.Name, owner.UID))
	stopCapable(t, sig)
	staysFor(t, outage, "the ConfigMap whose PDB owner exists (its server is down)", getCM(t, ns, "dependent"))
	if err := cluster.StartAPIServer(capable); err != nil {
		t.Fatal(err)
	}
	staysFor(t, observe, "the ConfigMap whose PDB owner exists (its server is back)", getCM(t, ns, "dependent"))
	if err := kube(t, capable).PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	goneWithin(t, converged(), "the ConfigMap whose PDB owner was deleted", getCM(t, ns, "dependent"))
}

// testGCDependentDuringOutage: the ConfigMap owner of a PDB is deleted
// while the PDB's only server is stopped with sig; the garbage collector
// cannot delete the PDB then (503), and collects it once the server is
// back: no orphan.
func testGCDependentDuringOutage(t *testing.T, ns string, sig syscall.Signal) {
	createNamespace(t, ns)
	owner := configMap(t, ns, "owner")
	pdb(t, ns, "dependent", ownerRef("v1", "ConfigMap", owner.Name, owner.UID))
	stopCapable(t, sig)
	if err := kube(t, old).CoreV1().ConfigMaps(ns).Delete(context.Background(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage)
	if err := cluster.StartAPIServer(capable); err != nil {
		t.Fatal(err)
	}
	took := goneWithin(t, converged(), "the PDB whose ConfigMap owner was deleted during the outage", getPDB(t, ns, "dependent"))
	t.Logf("dependent collected %v after its server was back", took.Round(time.Second))
}
