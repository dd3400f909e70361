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
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/test/discoverycheck"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestLegacyDiscoveryAndOpenAPI: through v1.36.3 (certificates.k8s.io/v1
// off, storagemigration.k8s.io/v1 not served), every client sees the
// cluster: the legacy discovery endpoints, OpenAPI v3 (kubectl explain,
// strict validation), and the Python client's dynamic client.
func TestLegacyDiscoveryAndOpenAPI(t *testing.T) {
	readyPlane(t)
	res := discoverycheck.LegacyAndOpenAPI(t, cluster, old)
	t.Logf("through v1.36.3: %d group-versions, %d answered by peers (%d with no single capable server), %d OpenAPI documents from peers",
		res.GroupVersions, res.FromPeers, res.Split, res.OpenAPIFromPeers)
	if res.FromPeers == 0 || res.OpenAPIFromPeers == 0 {
		t.Fatalf("no group-version came from a peer: the skew this test needs is gone (%+v)", res)
	}
	ctxOld := cluster.Servers()[old].Context

	t.Run("kubectl explain", func(t *testing.T) {
		out, err := cluster.Kubectl("--context", ctxOld, "explain", "storageversionmigrations.spec")
		if err != nil || !strings.Contains(out, "resource") || !strings.Contains(out, "StorageVersionMigration") {
			t.Fatalf("kubectl explain through v1.36.3: %v\n%s", err, out)
		}
	})

	t.Run("kubectl create --validate=strict rejects an unknown field", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "svm.yaml")
		if err := os.WriteFile(manifest, []byte(`apiVersion: storagemigration.k8s.io/v1
kind: StorageVersionMigration
metadata:
  name: strict-unknown-field
spec:
  resource: {group: "", resource: configmaps}
  notAField: 1
`), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := cluster.Kubectl("--context", ctxOld, "create", "--validate=strict", "-f", manifest)
		if err == nil || !strings.Contains(err.Error(), `unknown field "spec.notAField"`) {
			t.Fatalf("want the unknown field rejected; got %v\n%s", err, out)
		}
		if _, err := planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm).Get(context.Background(), "strict-unknown-field", metav1.GetOptions{}); err == nil {
			t.Fatal("the rejected object was created")
		}
	})

	t.Run("the Python client's dynamic client lists a v1.37-only resource", func(t *testing.T) {
		python := pythonWithKubernetes(t)
		name := fmt.Sprintf("python-%d", time.Now().UnixNano())
		if _, err := planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm).Create(context.Background(), newSVM(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm).Delete(context.Background(), name, metav1.DeleteOptions{})
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, "testdata/dynamic_list.py", cluster.Kubeconfig(), ctxOld,
			"storagemigration.k8s.io/v1", "StorageVersionMigration", filepath.Join(t.TempDir(), "discovery.json"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), name) {
			t.Fatalf("python dynamic client through v1.36.3: %v\n%s", err, out)
		}
		t.Logf("python kubernetes client listed %s through v1.36.3", name)
	})
}

// pythonWithKubernetes is the Python that has the Kubernetes client
// (Debian's python3-kubernetes; hack/test.sh installs it).
func pythonWithKubernetes(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import kubernetes.dynamic").Run() == nil {
			return p
		}
	}
	t.Fatal("no python3 with the kubernetes client: run hack/install-test-deps.sh (apt-get install python3-kubernetes)")
	return ""
}
