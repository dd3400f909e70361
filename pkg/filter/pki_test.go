package filter

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// peerServerName is the name every kube-apiserver's serving certificate
// carries and the filter verifies (upstream's choice).
const peerServerName = "kubernetes.default.svc"

// frontProxyClientName is the CN of the proxy client certificate, as in
// --requestheader-allowed-names.
const frontProxyClientName = "front-proxy-client"

var serial atomic.Int64

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue signs a leaf certificate; it returns the PEM of the certificate and
// of its key, and the tls.Certificate.
func (ca *testCA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) ([]byte, []byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

// testPKI is a control plane's certificates: the peer CA signs every
// kube-apiserver's serving certificate (for kubernetes.default.svc); the
// front-proxy CA signs the proxy client certificate the filter presents.
type testPKI struct {
	peerCA, frontProxyCA *testCA
	serving              tls.Certificate

	dir                                   string
	peerCAFile, clientCertFile, clientKey string
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	p := &testPKI{
		peerCA:       newTestCA(t, "peer-ca"),
		frontProxyCA: newTestCA(t, "front-proxy-ca"),
		dir:          t.TempDir(),
	}
	_, _, p.serving = p.peerCA.issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, []string{peerServerName}, []net.IP{net.ParseIP("127.0.0.1")})
	certPEM, keyPEM, _ := p.frontProxyCA.issue(t, frontProxyClientName, x509.ExtKeyUsageClientAuth, nil, nil)
	p.peerCAFile = filepath.Join(p.dir, "peer-ca.crt")
	p.clientCertFile = filepath.Join(p.dir, "proxy-client.crt")
	p.clientKey = filepath.Join(p.dir, "proxy-client.key")
	writeFile(t, p.peerCAFile, p.peerCA.pem)
	writeFile(t, p.clientCertFile, certPEM)
	writeFile(t, p.clientKey, keyPEM)
	return p
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// peerTLSConfig is a kube-apiserver's serving TLS: its serving certificate,
// and client certificates verified against the front-proxy CA (its
// --requestheader-client-ca-file). Client certificates are required, so a
// filter that did not present its proxy client certificate is refused.
func (p *testPKI) peerTLSConfig(serving tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.frontProxyCA.pool(),
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
}
