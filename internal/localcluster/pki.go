package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is how long every certificate of a local cluster is valid.
const certValidity = 365 * 24 * time.Hour

// KeyPair is a certificate, its private key, and both PEM-encoded.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// newKey makes an ECDSA P-256 key: every component accepts it, and it is
// much cheaper to generate than RSA (tests mint client certificates freely).
func newKey() (*ecdsa.PrivateKey, []byte, error) {
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
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	c, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, err
	}
	certPEM, err := cert.EncodeCertificates(c)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: c, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// sign issues a certificate from tmpl with a fresh key.
func (ca *KeyPair) sign(tmpl *x509.Certificate) (*KeyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	// Tolerate clock skew between the certificate's birth and its users.
	tmpl.NotBefore = now.Add(-time.Hour).UTC()
	tmpl.NotAfter = now.Add(certValidity).UTC()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
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
	return ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// NewClientCert issues a TLS client certificate: kube-apiserver maps the
// common name to the user name and the organizations to the groups.
func (ca *KeyPair) NewClientCert(user string, groups []string) (*KeyPair, error) {
	return ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// write writes the certificate to dir/name.crt and, if withKey, the key to
// dir/name.key (mode 0600). It returns both paths.
func (kp *KeyPair) write(dir, name string, withKey bool) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".crt")
	if err := os.WriteFile(certFile, kp.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if withKey {
		keyFile = filepath.Join(dir, name+".key")
		if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
			return "", "", err
		}
	}
	return certFile, keyFile, nil
}

// pki is every credential of a local cluster, generated in Go at start.
type pki struct {
	dir string

	// ca signs the kube-apiservers' serving certificates and every client
	// certificate (--client-ca-file, --peer-ca-file).
	ca     *KeyPair
	caFile string
	// admin is a system:masters client certificate.
	admin *KeyPair
	// frontProxyCA verifies the aggregator's (and the filter's) proxy
	// client certificate (--requestheader-client-ca-file).
	frontProxyCA     *KeyPair
	frontProxyCAFile string
	// frontProxyClient is --proxy-client-cert-file/--proxy-client-key-file.
	frontProxyClientCert, frontProxyClientKey string
	// Service-account token signing key pair.
	saKeyFile, saPubFile string
	// extCA signs peerdiscovery-apiserver's serving certificate; it is the
	// APIService's caBundle.
	extCA     *KeyPair
	extCAFile string
	// extServingCert/Key is shared by every replica (like a Deployment's
	// Secret).
	extServingCert, extServingKey string
}

// extServiceDNS is the name the aggregator verifies in the extension
// server's serving certificate: <service>.<namespace>.svc.
const extServiceDNS = "peerdiscovery-apiserver.peerdiscovery.svc"

// kubernetesDNSNames are the names of the kubernetes Service, which every
// kube-apiserver's serving certificate carries (peerdiscovery-apiserver
// verifies peers as kubernetes.default.svc by default).
var kubernetesDNSNames = []string{
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
	"localhost",
}

// newPKI generates the cluster's CAs, the shared credentials and the
// extension server's serving certificate, and writes them to dir.
func newPKI(dir string, extIPs []net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	var err error
	fail := func(what string, err error) (*pki, error) {
		return nil, fmt.Errorf("generating %s: %w", what, err)
	}

	if p.ca, err = NewCA("peerdiscovery-local-ca"); err != nil {
		return fail("cluster CA", err)
	}
	if p.caFile, _, err = p.ca.write(dir, "ca", true); err != nil {
		return fail("cluster CA", err)
	}
	if p.admin, err = p.ca.NewClientCert("local-admin", []string{"system:masters"}); err != nil {
		return fail("admin client certificate", err)
	}
	if _, _, err = p.admin.write(dir, "admin", true); err != nil {
		return fail("admin client certificate", err)
	}

	if p.frontProxyCA, err = NewCA("peerdiscovery-local-front-proxy-ca"); err != nil {
		return fail("front-proxy CA", err)
	}
	if p.frontProxyCAFile, _, err = p.frontProxyCA.write(dir, "front-proxy-ca", true); err != nil {
		return fail("front-proxy CA", err)
	}
	fpc, err := p.frontProxyCA.NewClientCert("front-proxy-client", nil)
	if err != nil {
		return fail("front-proxy client certificate", err)
	}
	if p.frontProxyClientCert, p.frontProxyClientKey, err = fpc.write(dir, "front-proxy-client", true); err != nil {
		return fail("front-proxy client certificate", err)
	}

	saKey, saKeyPEM, err := newKey()
	if err != nil {
		return fail("service account key", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fail("service account key", err)
	}
	p.saKeyFile = filepath.Join(dir, "sa.key")
	p.saPubFile = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saKeyFile, saKeyPEM, 0o600); err != nil {
		return fail("service account key", err)
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return fail("service account key", err)
	}

	if p.extCA, err = NewCA("peerdiscovery-apiserver-ca"); err != nil {
		return fail("peerdiscovery-apiserver CA", err)
	}
	if p.extCAFile, _, err = p.extCA.write(dir, "peerdiscovery-apiserver-ca", true); err != nil {
		return fail("peerdiscovery-apiserver CA", err)
	}
	ext, err := p.extCA.NewServingCert("peerdiscovery-apiserver",
		[]string{extServiceDNS, extServiceDNS + ".cluster.local", "peerdiscovery-apiserver.peerdiscovery", "peerdiscovery-apiserver"}, extIPs)
	if err != nil {
		return fail("peerdiscovery-apiserver serving certificate", err)
	}
	if p.extServingCert, p.extServingKey, err = ext.write(dir, "peerdiscovery-apiserver", true); err != nil {
		return fail("peerdiscovery-apiserver serving certificate", err)
	}
	return p, nil
}

// kubeAPIServerCert issues and writes the serving certificate of one
// kube-apiserver.
func (p *pki) kubeAPIServerCert(name string, ips []net.IP) (certFile, keyFile string, err error) {
	kp, err := p.ca.NewServingCert(name, kubernetesDNSNames, ips)
	if err != nil {
		return "", "", fmt.Errorf("generating the serving certificate of %s: %w", name, err)
	}
	return kp.write(p.dir, name, true)
}
