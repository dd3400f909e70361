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
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

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
	planetest.WaitFor(t, time.Minute, "the aggregator to use the new caBundle", func() error {
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
