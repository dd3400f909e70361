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

package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// TestIssue checks that issued certificates chain to their own CA only,
// with the names, addresses, subject and usage asked for.
func TestIssue(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Cert.Verify(verifyOptions(ca, "", x509.ExtKeyUsageAny)); err != nil {
		t.Errorf("CA does not verify against itself: %v", err)
	}
	// Every certificate tolerates a clock that is a little behind.
	skewed := time.Now().Add(-clockSkew / 2)
	if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: skewed}); err != nil {
		t.Errorf("CA with the clock %s behind: %v", clockSkew/2, err)
	}
	ip := net.ParseIP("10.254.77.11")
	serving, err := ca.NewServingCert("kas", []string{"kubernetes.default.svc"}, []net.IP{ip})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serving.Cert.Verify(verifyOptions(ca, "kubernetes.default.svc", x509.ExtKeyUsageServerAuth)); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	if _, err := serving.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: skewed}); err != nil {
		t.Errorf("serving certificate with the clock %s behind: %v", clockSkew/2, err)
	}
	if err := serving.Cert.VerifyHostname(ip.String()); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	if _, err := serving.Cert.Verify(verifyOptions(other, "kubernetes.default.svc", x509.ExtKeyUsageServerAuth)); err == nil {
		t.Errorf("serving certificate verifies against another CA")
	}
	if _, err := serving.Cert.Verify(verifyOptions(ca, "kubernetes.default.svc", x509.ExtKeyUsageClientAuth)); err == nil {
		t.Errorf("serving certificate verifies for client auth")
	}
	client, err := ca.NewClientCert("alice", []string{"g1", "g2"})
	if err != nil {
		t.Fatal(err)
	}
	if client.Cert.Subject.CommonName != "alice" || strings.Join(client.Cert.Subject.Organization, ",") != "g1,g2" {
		t.Errorf("client certificate subject = %v", client.Cert.Subject)
	}
	if _, err := client.Cert.Verify(verifyOptions(ca, "", x509.ExtKeyUsageClientAuth)); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if serving.Cert.SerialNumber.Cmp(client.Cert.SerialNumber) == 0 {
		t.Errorf("two certificates with serial %v", serving.Cert.SerialNumber)
	}
	pair, err := serving.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf == nil || !pair.Leaf.Equal(serving.Cert) {
		t.Errorf("TLSCertificate does not hold the certificate")
	}
	if _, err := tls.X509KeyPair(serving.CertPEM, client.KeyPEM); err == nil {
		t.Errorf("two certificates share a key")
	}
}

// TestWrite checks the files read back as the pair, the key private.
func TestWrite(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := ca.Write(dir, "ca", false)
	if err != nil {
		t.Fatal(err)
	}
	if certFile != filepath.Join(dir, "ca.crt") || keyFile != "" {
		t.Errorf("Write(withKey=false) = %q, %q", certFile, keyFile)
	}
	certs, err := cert.CertsFromFile(certFile)
	if err != nil || len(certs) != 1 || !certs[0].Equal(ca.Cert) {
		t.Errorf("%s: %v, %d certificates", certFile, err, len(certs))
	}
	_, keyFile, err = ca.Write(dir, "ca", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyutil.PrivateKeyFromFile(keyFile); err != nil {
		t.Errorf("%s: %v", keyFile, err)
	}
	st, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", keyFile, st.Mode().Perm())
	}
}

func verifyOptions(ca *KeyPair, dnsName string, usage x509.ExtKeyUsage) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: ca.Pool(), DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{usage}}
}
