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

package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The deploy manifests (artifacts/deploy) against the real control plane:
// they pass server-side validation and admission (dry run), and the
// ServiceAccount of peerdiscovery-apiserver gets exactly the RBAC it needs.

const (
	deployDir = "../../artifacts/deploy"
	extSA     = "system:serviceaccount:peerdiscovery:peerdiscovery-apiserver"
	// A ServiceAccount of the same namespace with no bindings of its own:
	// what every ServiceAccount there may do. The difference to extSA is
	// what artifacts/deploy grants.
	baselineSA = "system:serviceaccount:peerdiscovery:e2e-no-bindings"
)

// TestDeploy checks artifacts/deploy on the newest server: server-side
// dry runs, the RBAC it grants, and hack/deploy-certs.sh.
func TestDeploy(t *testing.T) {
	readyPlane(t)
	kctx := cluster.Servers()[new1].Context

	t.Run("DryRunBase", func(t *testing.T) { testDryRunBase(t, kctx) })
	t.Run("DryRunHAOverlay", func(t *testing.T) { testDryRunOverlay(t, kctx, "ha") })
	t.Run("RBAC", func(t *testing.T) { testDeployRBAC(t, kctx) })
	t.Run("DeployCerts", func(t *testing.T) { testDeployCerts(t, kctx) })
}

// kubectlIn runs kubectl with stdin; it returns stdout and an error that
// carries stderr. Warnings (e.g. Pod Security) are returned separately.
func kubectlIn(t *testing.T, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(cluster.KubectlBinary(), append([]string{"--kubeconfig=" + cluster.Kubeconfig()}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), stderr.String(), nil
}

// canIRow matches a row of `kubectl auth can-i --list --no-headers`:
// resource (empty for non-resource URLs), non-resource URLs, resource
// names, verbs.
var canIRow = regexp.MustCompile(`^(\S*)\s*(\[[^\]]*\])\s+(\[[^\]]*\])\s+(\[[^\]]*\])$`)

func canIList(t *testing.T, kctx, as string, nsArgs ...string) map[string]bool {
	t.Helper()
	args := append([]string{"--context", kctx, "auth", "can-i", "--list", "--no-headers", "--as=" + as}, nsArgs...)
	out, err := cluster.Kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		m := canIRow.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected kubectl auth can-i --list row %q in:\n%s", line, out)
		}
		rows[strings.Join(m[1:], " ")] = true
	}
	return rows
}

// Rows of `kubectl auth can-i --list` that artifacts/deploy grants the
// server on top of what every ServiceAccount of its namespace may do.
var (
	clusterWideGrants = []string{
		"customresourcedefinitions.apiextensions.k8s.io [] [] [list watch]",
		"apiservices.apiregistration.k8s.io [] [] [list watch]",
		"tokenreviews.authentication.k8s.io [] [] [create]",
		"subjectaccessreviews.authorization.k8s.io [] [] [create]",
	}
	namespaceGrants = map[string][]string{
		"kube-system": {
			"leases.coordination.k8s.io [] [] [list watch]",
			"configmaps [] [extension-apiserver-authentication] [get list watch]",
		},
		"default": {
			"endpointslices.discovery.k8s.io [] [] [list watch]",
			"events [] [] [create patch update]",
		},
		"peerdiscovery": {
			"leases.coordination.k8s.io [] [] [create]",
			"leases.coordination.k8s.io [] [peerdiscovery-apiserver] [get update]",
		},
	}
)

func testDeployRBAC(t *testing.T, kctx string) {
	for ns, grants := range namespaceGrants {
		t.Run("list-"+ns, func(t *testing.T) {
			want := map[string]bool{}
			for _, r := range append(append([]string{}, clusterWideGrants...), grants...) {
				want[r] = true
			}
			got := canIList(t, kctx, extSA, "-n", ns)
			baseline := canIList(t, kctx, baselineSA, "-n", ns)
			extra := map[string]bool{}
			for r := range got {
				if !baseline[r] {
					extra[r] = true
				}
			}
			var missing, unexpected []string
			for r := range want {
				if !extra[r] {
					missing = append(missing, r)
				}
			}
			for r := range extra {
				if !want[r] {
					unexpected = append(unexpected, r)
				}
			}
			t.Logf("granted in %s beyond a ServiceAccount without bindings: %q", ns, slices.Sorted(maps.Keys(extra)))
			sort.Strings(missing)
			sort.Strings(unexpected)
			if len(missing) > 0 || len(unexpected) > 0 {
				t.Errorf("RBAC of %s in namespace %s:\n missing:    %q\n unexpected: %q\n all granted beyond a ServiceAccount without bindings: %q",
					extSA, ns, missing, unexpected, slices.Sorted(maps.Keys(extra)))
			}
		})
	}

	// Spot checks, including cluster scope (--all-namespaces) and
	// non-resource URLs, which --list per namespace does not show.
	type check struct {
		args []string
		want bool
	}
	checks := []check{
		// What it needs.
		{[]string{"list", "leases.coordination.k8s.io", "-n", "kube-system"}, true},
		{[]string{"watch", "leases.coordination.k8s.io", "-n", "kube-system"}, true},
		{[]string{"list", "endpointslices.discovery.k8s.io", "-n", "default"}, true},
		{[]string{"watch", "endpointslices.discovery.k8s.io", "-n", "default"}, true},
		{[]string{"create", "events", "-n", "default"}, true},
		{[]string{"patch", "events", "-n", "default"}, true},
		{[]string{"list", "customresourcedefinitions.apiextensions.k8s.io"}, true},
		{[]string{"watch", "apiservices.apiregistration.k8s.io"}, true},
		{[]string{"create", "tokenreviews.authentication.k8s.io"}, true},
		{[]string{"create", "subjectaccessreviews.authorization.k8s.io"}, true},
		{[]string{"get", "configmaps/extension-apiserver-authentication", "-n", "kube-system"}, true},
		{[]string{"get", "/api"}, true},
		{[]string{"get", "/apis"}, true},
		{[]string{"get", "/version"}, true},
		{[]string{"get", "/internal/peerdiscovery/replication"}, false},
		{[]string{"create", "leases.coordination.k8s.io", "-n", "peerdiscovery"}, true},
		{[]string{"update", "leases.coordination.k8s.io/peerdiscovery-apiserver", "-n", "peerdiscovery"}, true},
		{[]string{"get", "apiservices.apiregistration.k8s.io/v1alpha1.peerdiscovery.k8s.io"}, false},
		// Nothing more.
		{[]string{"get", "secrets", "-n", "kube-system"}, false},
		{[]string{"get", "secrets", "-n", "peerdiscovery"}, false},
		{[]string{"list", "secrets", "--all-namespaces"}, false},
		{[]string{"create", "leases.coordination.k8s.io", "-n", "kube-system"}, false},
		{[]string{"update", "leases.coordination.k8s.io", "-n", "kube-system"}, false},
		{[]string{"delete", "leases.coordination.k8s.io", "-n", "kube-system"}, false},
		{[]string{"list", "leases.coordination.k8s.io", "--all-namespaces"}, false},
		{[]string{"list", "leases.coordination.k8s.io", "-n", "default"}, false},
		{[]string{"update", "leases.coordination.k8s.io/kube-controller-manager", "-n", "peerdiscovery"}, false},
		{[]string{"delete", "leases.coordination.k8s.io", "-n", "peerdiscovery"}, false},
		{[]string{"get", "apiservices.apiregistration.k8s.io/v1.apps"}, false},
		{[]string{"get", "/internal/other"}, false},
		{[]string{"list", "pods", "--all-namespaces"}, false},
		{[]string{"list", "pods", "-n", "kube-system"}, false},
		{[]string{"list", "endpointslices.discovery.k8s.io", "--all-namespaces"}, false},
		{[]string{"create", "events", "-n", "kube-system"}, false},
		{[]string{"delete", "events", "-n", "default"}, false},
		{[]string{"get", "configmaps/kube-root-ca.crt", "-n", "kube-system"}, false},
		{[]string{"list", "configmaps", "--all-namespaces"}, false},
		{[]string{"get", "customresourcedefinitions.apiextensions.k8s.io"}, false},
		{[]string{"create", "customresourcedefinitions.apiextensions.k8s.io"}, false},
		{[]string{"patch", "apiservices.apiregistration.k8s.io"}, false},
		{[]string{"update", "apiservices.apiregistration.k8s.io", "--subresource=status"}, false},
		{[]string{"impersonate", "users"}, false},
		{[]string{"list", "nodes"}, false},
		{[]string{"get", "/metrics"}, false},
		{[]string{"list", "peerroutingtables.peerdiscovery.k8s.io"}, false},
	}
	for _, c := range checks {
		args := append([]string{"--context", kctx, "auth", "can-i", "--as=" + extSA}, c.args...)
		out, err := cluster.Kubectl(args...)
		answer := strings.TrimSpace(out)
		if answer != "yes" && answer != "no" {
			t.Errorf("kubectl auth can-i %s: %q, %v", strings.Join(c.args, " "), answer, err)
			continue
		}
		if got := answer == "yes"; got != c.want {
			t.Errorf("%s can-i %s: %s, want %v", extSA, strings.Join(c.args, " "), answer, c.want)
		}
	}
}
