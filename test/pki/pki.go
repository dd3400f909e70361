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

// Package pki makes throwaway certificate authorities and certificates for
// tests: real TLS peers, proxy client certificates, wrong CAs. It wraps
// internal/pki, failing the test instead of returning errors.
package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"

	"sigs.k8s.io/peerdiscovery/internal/pki"
)

// CA is a certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte

	ca *pki.KeyPair
}

// NewCA makes a self-signed CA.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	ca, err := pki.NewCA(cn)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := ca.Key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("internal/pki made a %T key, want ECDSA", ca.Key)
	}
	return &CA{Cert: ca.Cert, Key: key, CertPEM: ca.CertPEM, ca: ca}
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool { return ca.ca.Pool() }

// Issue signs a leaf certificate for usage (server or client auth); it
// returns the PEM of the certificate and of its key, and the pair.
func (ca *CA) Issue(t testing.TB, cn string, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) ([]byte, []byte, tls.Certificate) {
	t.Helper()
	kp, err := ca.ca.Issue(pkix.Name{CommonName: cn}, usage, dnsNames, ips)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return kp.CertPEM, kp.KeyPEM, pair
}

// Serving issues a serving certificate for the DNS names.
func (ca *CA) Serving(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	_, _, pair := ca.Issue(t, names[0], x509.ExtKeyUsageServerAuth, names, nil)
	return pair
}
