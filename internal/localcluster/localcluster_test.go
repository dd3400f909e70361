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
	"crypto/x509"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/peerdiscovery/internal/pki"
)

func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ca.Cert.Verify(x509VerifyOptions(p.ca, "")); err != nil {
		t.Errorf("CA does not verify against itself: %v", err)
	}
	if _, _, err := p.kubeAPIServerCert("kube-apiserver-0", nil); err != nil {
		t.Fatal(err)
	}
	kas, err := p.ca.NewServingCert("kas", kubernetesDNSNames, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kas.Cert.Verify(x509VerifyOptions(p.ca, "kubernetes.default.svc")); err != nil {
		t.Errorf("kube-apiserver serving certificate: %v", err)
	}
	ext, err := p.extCA.NewServingCert("ext", []string{extServiceDNS}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ext.Cert.Verify(x509VerifyOptions(p.extCA, extServiceDNS)); err != nil {
		t.Errorf("extension serving certificate: %v", err)
	}
	if _, err := ext.Cert.Verify(x509VerifyOptions(p.ca, extServiceDNS)); err == nil {
		t.Errorf("extension serving certificate verifies against the cluster CA, want only its own CA")
	}
	u, err := p.ca.NewClientCert("alice", []string{"g1", "g2"})
	if err != nil {
		t.Fatal(err)
	}
	if u.Cert.Subject.CommonName != "alice" || strings.Join(u.Cert.Subject.Organization, ",") != "g1,g2" {
		t.Errorf("client certificate subject = %v", u.Cert.Subject)
	}
}

func TestSubnetAddresses(t *testing.T) {
	sn := subnet(77)
	if sn.String() != "10.254.77.0/24" {
		t.Errorf("subnet(77) = %s", sn)
	}
	n := &network{Octet: 77}
	if got := n.ip(kubeIPSuffixBase + 1).String(); got != "10.254.77.11" {
		t.Errorf("ip = %s", got)
	}
}

func x509VerifyOptions(ca *pki.KeyPair, dnsName string) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: ca.Pool(), DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
}

func TestAssignContextNames(t *testing.T) {
	servers := []*kubeServer{
		{index: 0, spec: ServerSpec{Version: "v1.36.3"}},
		{index: 1, spec: ServerSpec{Version: "v1.37.2"}},
		{index: 2, spec: ServerSpec{Version: "v1.37.2"}},
	}
	assignContextNames(servers)
	got := []string{servers[0].context, servers[1].context, servers[2].context}
	want := []string{"v1.36.3", "v1.37.2-1", "v1.37.2-2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("contexts = %v, want %v", got, want)
	}
	if i := newestServer(servers); i != 2 {
		t.Errorf("newest = %d, want 2", i)
	}
}

func TestReadManifests(t *testing.T) {
	root, err := findRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := readManifests(root + "/" + manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Service", "APIService", "ClusterRole"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in %s (got %v)", k, manifestDir, kinds)
		}
	}
	if objs[0].GetKind() != "Namespace" {
		t.Errorf("first object is a %s, want the Namespace", objs[0].GetKind())
	}
}

func TestLogErrors(t *testing.T) {
	path := t.TempDir() + "/x.log"
	log := strings.Join([]string{
		"I1129 10:00:00.000000 1 a.go:1] fine",
		`E1129 10:00:01.000000 1 reflector.go:227] "Failed to watch" err="forbidden"`,
		"I1129 10:00:02.000000 1 healthz.go:311] informer-sync check failed",
		`E1129 10:00:03.000000 1 reflector.go:227] "Failed to watch" err="forbidden"`,
		`E1129 10:00:04.000000 1 other.go:1] boom`,
		"",
	}, "\n")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &process{logPath: path}
	got := p.logErrors(10)
	want := `E1129 10:00:03.000000 1 reflector.go:227] "Failed to watch" err="forbidden"` + "\n" + `E1129 10:00:04.000000 1 other.go:1] boom`
	if got != want {
		t.Errorf("logErrors =\n%s\nwant\n%s", got, want)
	}
}
