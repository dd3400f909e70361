package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

func TestDeploy(t *testing.T) {
	needCluster(t)
	kctx := waitAllServersReady(t)

	t.Run("DryRunBase", func(t *testing.T) { testDryRunBase(t, kctx) })
	t.Run("DryRunHAOverlay", func(t *testing.T) { testDryRunOverlay(t, kctx, "ha") })
	t.Run("RBAC", func(t *testing.T) { testDeployRBAC(t, kctx) })
	t.Run("DeployCerts", func(t *testing.T) { testDeployCerts(t, kctx) })
}

// waitAllServersReady waits until every kube-apiserver answers /readyz
// (other tests of the package stop and start them) and returns the context
// of the newest.
func waitAllServersReady(t *testing.T) string {
	t.Helper()
	servers := cluster.Servers()
	for _, s := range servers {
		waitFor(t, 3*time.Minute, s.Name+" /readyz", func() error {
			_, err := cluster.Kubectl("--context", s.Context, "get", "--raw", "/readyz")
			return err
		})
	}
	return servers[new1].Context
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
			t.Errorf("manifests lack %s (have %v)", k, keys(seen))
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

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Rows of `kubectl auth can-i --list` that artifacts/deploy grants the
// server on top of what every ServiceAccount of its namespace may do.
var (
	clusterWideGrants = []string{
		"customresourcedefinitions.apiextensions.k8s.io [] [] [list watch]",
		"apiservices.apiregistration.k8s.io [] [] [list watch]",
		"apiservices.apiregistration.k8s.io [] [v1alpha1.peerdiscovery.k8s.io] [get]",
		"tokenreviews.authentication.k8s.io [] [] [create]",
		"subjectaccessreviews.authorization.k8s.io [] [] [create]",
		// The leader's replication stream (a non-resource URL).
		" [/internal/peerdiscovery/replication] [] [get]",
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
			t.Logf("granted in %s beyond a ServiceAccount without bindings: %q", ns, sortedKeys(extra))
			sort.Strings(missing)
			sort.Strings(unexpected)
			if len(missing) > 0 || len(unexpected) > 0 {
				t.Errorf("RBAC of %s in namespace %s:\n missing:    %q\n unexpected: %q\n all granted beyond a ServiceAccount without bindings: %q",
					extSA, ns, missing, unexpected, sortedKeys(extra))
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
		{[]string{"get", "/internal/peerdiscovery/replication"}, true},
		{[]string{"create", "leases.coordination.k8s.io", "-n", "peerdiscovery"}, true},
		{[]string{"update", "leases.coordination.k8s.io/peerdiscovery-apiserver", "-n", "peerdiscovery"}, true},
		{[]string{"get", "apiservices.apiregistration.k8s.io/v1alpha1.peerdiscovery.k8s.io"}, true},
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

// testDeployCerts runs hack/deploy-certs.sh against the control plane: it
// must fill the APIService caBundle with its CA and write the Secret with
// a certificate for the Service that verifies against it, and a second run
// must reuse both. The local replicas serve a certificate of another CA,
// so the original caBundle is put back afterwards (and the APIService
// waited for) before other tests run.
func testDeployCerts(t *testing.T, kctx string) {
	const secret = "peerdiscovery-apiserver-tls"
	getCABundle := func() string {
		out, err := cluster.Kubectl("--context", kctx, "get", "apiservice", "v1alpha1.peerdiscovery.k8s.io", "-o", "jsonpath={.spec.caBundle}")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	orig := getCABundle()
	if orig == "" {
		t.Fatal("the local control plane's APIService has no caBundle")
	}
	t.Cleanup(func() {
		if _, err := cluster.Kubectl("--context", kctx, "-n", "peerdiscovery", "delete", "secret", secret, "--ignore-not-found"); err != nil {
			t.Error(err)
		}
		patch := fmt.Sprintf(`{"spec":{"caBundle":%q}}`, orig)
		if _, err := cluster.Kubectl("--context", kctx, "patch", "apiservice", "v1alpha1.peerdiscovery.k8s.io", "--type=merge", "-p", patch); err != nil {
			t.Errorf("restoring the caBundle: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cluster.WaitExtensionAvailable(ctx); err != nil {
			t.Errorf("APIService after restoring the caBundle: %v", err)
		}
	})

	script, err := filepath.Abs("../../hack/deploy-certs.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func() string {
		cmd := exec.Command(script, "--kubeconfig", cluster.Kubeconfig(), "--context="+kctx, "--dir", dir)
		cmd.Env = append(cmd.Environ(), "KUBECTL="+cluster.KubectlBinary())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hack/deploy-certs.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	readSecret := func() (crt, key []byte) {
		out, err := cluster.Kubectl("--context", kctx, "-n", "peerdiscovery", "get", "secret", secret, "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var sec struct {
			Type string            `json:"type"`
			Data map[string][]byte `json:"data"`
		}
		if err := json.Unmarshal([]byte(out), &sec); err != nil {
			t.Fatal(err)
		}
		if sec.Type != "kubernetes.io/tls" {
			t.Errorf("Secret type %q, want kubernetes.io/tls", sec.Type)
		}
		return sec.Data["tls.crt"], sec.Data["tls.key"]
	}

	t.Logf("first run:\n%s", run())
	bundle, err := base64.StdEncoding.DecodeString(getCABundle())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatalf("caBundle is not PEM: %q", bundle)
	}
	crtPEM, keyPEM := readSecret()
	if len(keyPEM) == 0 {
		t.Error("Secret without tls.key")
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatalf("tls.crt is not PEM: %q", crtPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"peerdiscovery-apiserver.peerdiscovery.svc", "peerdiscovery-apiserver.peerdiscovery.svc.cluster.local"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s against the caBundle: %v", name, err)
		}
	}
	if cert.IsCA {
		t.Error("the serving certificate is a CA")
	}

	// The aggregator now verifies the replicas against the script's CA,
	// which did not sign their (local) certificate: requests through it
	// fail. That shows the caBundle it set is the one in use.
	waitFor(t, time.Minute, "the aggregator to use the new caBundle", func() error {
		if _, err := cluster.Kubectl("--context", kctx, "get", "--raw", "/apis/peerdiscovery.k8s.io/v1alpha1"); err == nil {
			return fmt.Errorf("GET /apis/peerdiscovery.k8s.io/v1alpha1 still succeeds")
		}
		return nil
	})

	// Idempotent: the same CA and certificate.
	second := run()
	if !strings.Contains(second, "reusing it") {
		t.Errorf("second run did not reuse the certificate:\n%s", second)
	}
	if crt2, _ := readSecret(); !bytes.Equal(crt2, crtPEM) {
		t.Error("second run changed the Secret")
	}
	if b2, _ := base64.StdEncoding.DecodeString(getCABundle()); !bytes.Equal(b2, bundle) {
		t.Error("second run changed the caBundle")
	}
}
