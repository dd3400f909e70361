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
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// extensionProcesses are the host pids of the peerdiscovery-apiserver
// containers.
func extensionProcesses(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if argv0, _, _ := strings.Cut(string(b), "\x00"); argv0 == "/peerdiscovery-apiserver" {
			out = append(out, pid)
		}
	}
	return out
}

// procStatus is a field of /proc/<pid>/status.
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// checkExtension: the Deployment's Pods run in containers on two nodes,
// Ready through their real probes, as 65532 with no capabilities on a
// read-only root file system; the PDB guards them; the APIService is
// Available through the Service.
func checkExtension(t *testing.T) {
	t.Helper()
	img, err := (&localcluster.Config{RepoRoot: cluster.RepoRoot()}).ExtensionImage()
	if err != nil {
		t.Fatal(err)
	}
	// The controllers (Deployment, disruption) may still be catching up
	// after a rollout or a restart of kube-controller-manager.
	planetest.WaitFor(t, 2*time.Minute, "two Ready Pods of the extension on two nodes", func() error {
		pods, err := podList("-n", localcluster.ExtensionNamespace, "-l", "app.kubernetes.io/name=peerdiscovery")
		if err != nil {
			return err
		}
		nodes := sets.New[string]()
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Spec.Containers[0].Image != img {
				return fmt.Errorf("%s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, img)
			}
			if p.Status.Phase == corev1.PodRunning && podReady(p) {
				ready++
				nodes.Insert(p.Spec.NodeName)
			}
		}
		if ready != 2 || nodes.Len() != 2 {
			return fmt.Errorf("%d Ready Pods on nodes %v, want 2 on two nodes (anti-affinity)", ready, sets.List(nodes))
		}
		return nil
	})
	pids := extensionProcesses(t)
	if len(pids) < 2 {
		t.Errorf("%d peerdiscovery-apiserver processes on the host, want 2", len(pids))
	}
	for _, pid := range pids {
		if uid := procStatus(t, pid, "Uid"); uid != "65532 65532 65532 65532" {
			t.Errorf("pid %d: Uid %s, want 65532", pid, uid)
		}
		if caps := procStatus(t, pid, "CapEff"); caps != "0000000000000000" {
			t.Errorf("pid %d: effective capabilities %s, want none", pid, caps)
		}
		mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(l)
			if len(f) >= 4 && f[1] == "/" && !strings.HasPrefix(f[3], "ro") {
				t.Errorf("pid %d: root file system mounted %s, want read-only", pid, f[3])
			}
		}
	}
	planetest.WaitFor(t, 2*time.Minute, "the PodDisruptionBudget to allow one disruption of two", func() error {
		pdb, err := tryKubectl("get", "pdb", "-n", localcluster.ExtensionNamespace, "peerdiscovery-apiserver", "-o", "jsonpath={.status.currentHealthy} {.status.disruptionsAllowed}")
		if err != nil {
			return err
		}
		if pdb != "2 1" {
			return fmt.Errorf("currentHealthy, disruptionsAllowed = %q, want \"2 1\"", pdb)
		}
		return nil
	})
	planetest.WaitFor(t, 2*time.Minute, "APIService "+localcluster.APIServiceName+" Available", func() error {
		avail, err := tryKubectl("get", "apiservice", localcluster.APIServiceName, "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
		if err != nil {
			return err
		}
		if avail != "True" {
			return fmt.Errorf("Available=%q", avail)
		}
		return nil
	})
}

// TestExtension: the extension as its users install it, and what its
// ServiceAccount may do: the rules of artifacts/deploy/base/rbac.yaml and
// nothing more, and the Pods need nothing more (no request of theirs was
// refused).
func TestExtension(t *testing.T) {
	needCluster(t)
	checkExtension(t)
	sa := "system:serviceaccount:" + localcluster.ExtensionNamespace + ":" + localcluster.ExtensionServiceAccount
	for _, ns := range []string{localcluster.ExtensionNamespace, "kube-system", "default"} {
		t.Logf("kubectl auth can-i --list --as %s -n %s:\n%s", sa, ns, kubectl(t, "auth", "can-i", "--list", "--as", sa, "-n", ns))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "leases", "-n", "kube-system"}, "yes"},
		{[]string{"watch", "leases", "-n", "kube-system"}, "yes"},
		{[]string{"update", "leases", "-n", "kube-system"}, "no"},
		{[]string{"update", "leases/peerdiscovery-apiserver", "-n", localcluster.ExtensionNamespace}, "yes"},
		{[]string{"create", "tokenreviews"}, "yes"},
		{[]string{"create", "subjectaccessreviews"}, "yes"},
		{[]string{"list", "customresourcedefinitions.apiextensions.k8s.io"}, "yes"},
		{[]string{"get", "secrets", "-n", localcluster.ExtensionNamespace}, "no"},
		{[]string{"list", "pods", "-A"}, "no"},
		{[]string{"create", "pods", "-n", localcluster.ExtensionNamespace}, "no"},
		{[]string{"delete", "apiservices.apiregistration.k8s.io"}, "no"},
	} {
		out, _ := cluster.Kubectl(append([]string{"auth", "can-i", "--as", sa}, c.args...)...)
		if got := strings.TrimSpace(out); got != c.want {
			t.Errorf("can-i %s: %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	// Nothing the Pods asked for was refused: no 403 for the
	// ServiceAccount in any server's audit log (Leases and Events are not
	// audited), and no "forbidden" in the Pods' logs.
	for i := range cluster.Servers() {
		if n := forbidden(t, cluster.AuditLogPath(i), sa); n > 0 {
			t.Errorf("%d requests of %s refused (403) by kube-apiserver %d (audit log %s)", n, sa, i, cluster.AuditLogPath(i))
		}
	}
	logs, _ := filepath.Glob(filepath.Join(cluster.RunDir(), "nodes", "*", "pods", localcluster.ExtensionNamespace+"_*", "*", "*.log"))
	if len(logs) == 0 {
		t.Error("no container logs of the extension's Pods found")
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "forbidden") || strings.Contains(line, "Forbidden") {
				t.Errorf("%s: %s", l, line)
			}
		}
	}
}

// forbidden counts the audit events of user answered 403.
func forbidden(t *testing.T, path, user string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var ev struct {
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestURI string `json:"requestURI"`
		}
		if json.Unmarshal([]byte(l), &ev) != nil || ev.User.Username != user || ev.ResponseStatus.Code != 403 {
			continue
		}
		t.Logf("403: %s", ev.RequestURI)
		n++
	}
	return n
}
