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

// Package pki makes throwaway certificate authorities and the certificates
// they sign, for local control planes and tests. Every key is ECDSA P-256:
// every component accepts it, and it is much cheaper to generate than RSA
// (tests mint client certificates freely).
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

const (
	// leafValidity is how long an issued certificate is valid (a CA is
	// valid for client-go's cert.NewSelfSignedCACert's ten years).
	leafValidity = 365 * 24 * time.Hour
	// clockSkew backdates every certificate, to tolerate clock skew between
	// its birth and its users.
	clockSkew = time.Hour
)

// KeyPair is a certificate, its private key, and both PEM-encoded.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// GenerateKey makes a private key and its PEM encoding.
func GenerateKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return key, keyPEM, nil
}

// NewCA makes a self-signed certificate authority.
func NewCA(commonName string) (*KeyPair, error) {
	key, keyPEM, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName, NotBefore: time.Now().Add(-clockSkew)}, key)
	if err != nil {
		return nil, err
	}
	certPEM, err := cert.EncodeCertificates(c)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: c, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Issue signs a certificate for subject with a fresh key, for one extended
// key usage (server or client auth) and the given names and addresses.
func (ca *KeyPair) Issue(subject pkix.Name, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) (*KeyPair, error) {
	key, keyPEM, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-clockSkew).UTC(),
		NotAfter:     now.Add(leafValidity).UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
	return &KeyPair{Cert: c, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// NewServingCert issues a TLS serving certificate for the given names and
// addresses.
func (ca *KeyPair) NewServingCert(commonName string, dnsNames []string, ips []net.IP) (*KeyPair, error) {
	return ca.Issue(pkix.Name{CommonName: commonName}, x509.ExtKeyUsageServerAuth, dnsNames, ips)
}

// NewClientCert issues a TLS client certificate: kube-apiserver maps the
// common name to the user name and the organizations to the groups.
func (ca *KeyPair) NewClientCert(user string, groups []string) (*KeyPair, error) {
	return ca.Issue(pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
}

// Pool is a certificate pool holding only this certificate (a CA's, to
// verify what it signed).
func (kp *KeyPair) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(kp.Cert)
	return pool
}

// TLSCertificate is the pair for a tls.Config.
func (kp *KeyPair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
}

// Write writes the certificate to dir/name.crt and, if withKey, the key to
// dir/name.key (mode 0600). It returns both paths (keyFile "" without the
// key).
func (kp *KeyPair) Write(dir, name string, withKey bool) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".crt")
	if err := cert.WriteCert(certFile, kp.CertPEM); err != nil {
		return "", "", err
	}
	if withKey {
		keyFile = filepath.Join(dir, name+".key")
		if err := keyutil.WriteKey(keyFile, kp.KeyPEM); err != nil {
			return "", "", err
		}
	}
	return certFile, keyFile, nil
}
