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
	"encoding/json"
	"errors"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	out, err := cluster.Kubectl("kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

func decodeDocs(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding kustomize output: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// checkDryRun applies manifests with --dry-run=server (validation, defaults
// and admission of the real servers, nothing persisted), then creates a
// Pod from the Deployment's template the same way, so Pod Security
// (restricted, enforced in the namespace), the priority class and the
// ServiceAccount are checked too: a Deployment alone is not admitted as a
// Pod.
func checkDryRun(t *testing.T, kctx string, manifests []byte, want map[string]bool) {
	t.Helper()
	out, stderr, err := kubectlIn(t, manifests, "--context", kctx, "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply --dry-run=server:\n%s", out)
	for _, line := range strings.Split(stderr, "\n") {
		// Objects local-up applied without kubectl's annotation warn about
		// it; anything else (Pod Security, deprecations) is a failure.
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(line, "kubectl.kubernetes.io/last-applied-configuration") {
			t.Errorf("kubectl apply --dry-run=server warned: %s", line)
		}
	}
	objs := decodeDocs(t, manifests)
	seen := map[string]bool{}
	var deployment *unstructured.Unstructured
	for _, o := range objs {
		seen[o.GetKind()+"/"+o.GetName()] = true
		if o.GetKind() == "Deployment" {
			deployment = o
		}
		if o.GetKind() == "APIService" {
			if v, found, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify"); found && v {
				t.Errorf("APIService %s sets insecureSkipTLSVerify", o.GetName())
			}
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("manifests lack %s (have %v)", k, slices.Sorted(maps.Keys(seen)))
		}
	}
	if deployment == nil {
		t.Fatal("no Deployment in the manifests")
	}
	tmpl, found, err := unstructured.NestedMap(deployment.Object, "spec", "template")
	if err != nil || !found {
		t.Fatalf("Deployment without a Pod template: %v", err)
	}
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":      "e2e-deploy-dry-run",
			"namespace": deployment.GetNamespace(),
			"labels":    tmpl["metadata"].(map[string]any)["labels"],
		},
		"spec": tmpl["spec"],
	}
	js, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err = kubectlIn(t, js, "--context", kctx, "create", "--dry-run=server", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatalf("the Deployment's Pod is not admitted: %v", err)
	}
	if strings.TrimSpace(stderr) != "" {
		t.Errorf("creating the Deployment's Pod warned: %s", stderr)
	}
	var created struct {
		Spec struct {
			Priority          *int32 `json:"priority"`
			PriorityClassName string `json:"priorityClassName"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	// The Priority admission plugin resolved the class.
	if created.Spec.PriorityClassName != "system-cluster-critical" || created.Spec.Priority == nil || *created.Spec.Priority < 2000000000 {
		t.Errorf("Pod priority: class %q value %v, want system-cluster-critical", created.Spec.PriorityClassName, created.Spec.Priority)
	}
}

var baseObjects = map[string]bool{
	"Namespace/peerdiscovery":                                                       true,
	"ServiceAccount/peerdiscovery-apiserver":                                        true,
	"ClusterRole/peerdiscovery-apiserver":                                           true,
	"Service/peerdiscovery-apiserver":                                               true,
	"Deployment/peerdiscovery-apiserver":                                            true,
	"APIService/v1alpha1.peerdiscovery.k8s.io":                                      true,
	"ClusterRole/peerdiscovery-reader":                                              true,
	"ClusterRole/peerdiscovery-filter":                                              true,
	"Role/peerdiscovery-apiserver":                                                  true,
	"RoleBinding/peerdiscovery-apiserver":                                           true,
	"ClusterRoleBinding/peerdiscovery-apiserver":                                    true,
	"Role/peerdiscovery-filter":                                                     true,
	"RoleBinding/peerdiscovery-apiserver:extension-apiserver-authentication-reader": true,
	"ClusterRoleBinding/peerdiscovery-apiserver:system:auth-delegator":              true,
}

func testDryRunBase(t *testing.T, kctx string) {
	base, err := filepath.Abs(filepath.Join(deployDir, "base"))
	if err != nil {
		t.Fatal(err)
	}
	// The operator's command, as is.
	out, err := cluster.Kubectl("--context", kctx, "apply", "--dry-run=server", "-k", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply --dry-run=server -k %s:\n%s", base, out)
	checkDryRun(t, kctx, kustomize(t, base), baseObjects)
}

func testDryRunOverlay(t *testing.T, kctx, name string) {
	dir, err := filepath.Abs(filepath.Join(deployDir, "overlays", name))
	if err != nil {
		t.Fatal(err)
	}
	manifests := kustomize(t, dir)
	want := map[string]bool{"PodDisruptionBudget/peerdiscovery-apiserver": true}
	for k := range baseObjects {
		want[k] = true
	}
	checkDryRun(t, kctx, manifests, want)
	for _, o := range decodeDocs(t, manifests) {
		if o.GetKind() != "Deployment" {
			continue
		}
		aa, found, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
		if !found || len(aa) == 0 {
			t.Errorf("overlay %s: the Deployment has no required pod anti-affinity", name)
		}
		// Decoded from YAML through JSON: numbers are float64.
		r, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
		if n, ok := r.(float64); !ok || n < 2 {
			t.Errorf("overlay %s: replicas %v, want at least 2", name, r)
		}
	}
}
