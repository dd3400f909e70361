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
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/util/keyutil"

	"sigs.k8s.io/peerdiscovery/internal/pki"
)

// clusterPKI is every credential of a local cluster, generated in Go at start.
type clusterPKI struct {
	dir string

	// ca signs the kube-apiservers' serving certificates and every client
	// certificate (--client-ca-file, --peer-ca-file).
	ca     *pki.KeyPair
	caFile string
	// admin is a system:masters client certificate.
	admin *pki.KeyPair
	// frontProxyCA verifies the aggregator's (and the filter's) proxy
	// client certificate (--requestheader-client-ca-file).
	frontProxyCA     *pki.KeyPair
	frontProxyCAFile string
	// frontProxyClient is --proxy-client-cert-file/--proxy-client-key-file.
	frontProxyClientCert, frontProxyClientKey string
	// Service-account token signing key pair.
	saKeyFile, saPubFile string
	// extCA signs peerdiscovery-apiserver's serving certificate; it is the
	// APIService's caBundle.
	extCA     *pki.KeyPair
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
func newPKI(dir string, extIPs []net.IP) (*clusterPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &clusterPKI{dir: dir}
	var err error
	fail := func(what string, err error) (*clusterPKI, error) {
		return nil, fmt.Errorf("generating %s: %w", what, err)
	}

	if p.ca, err = pki.NewCA("peerdiscovery-local-ca"); err != nil {
		return fail("cluster CA", err)
	}
	if p.caFile, _, err = p.ca.Write(dir, "ca", true); err != nil {
		return fail("cluster CA", err)
	}
	if p.admin, err = p.ca.NewClientCert(adminUser, []string{"system:masters"}); err != nil {
		return fail("admin client certificate", err)
	}
	if _, _, err = p.admin.Write(dir, "admin", true); err != nil {
		return fail("admin client certificate", err)
	}

	if p.frontProxyCA, err = pki.NewCA("peerdiscovery-local-front-proxy-ca"); err != nil {
		return fail("front-proxy CA", err)
	}
	if p.frontProxyCAFile, _, err = p.frontProxyCA.Write(dir, "front-proxy-ca", true); err != nil {
		return fail("front-proxy CA", err)
	}
	fpc, err := p.frontProxyCA.NewClientCert("front-proxy-client", nil)
	if err != nil {
		return fail("front-proxy client certificate", err)
	}
	if p.frontProxyClientCert, p.frontProxyClientKey, err = fpc.Write(dir, "front-proxy-client", true); err != nil {
		return fail("front-proxy client certificate", err)
	}

	saKey, saKeyPEM, err := pki.GenerateKey()
	if err != nil {
		return fail("service account key", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fail("service account key", err)
	}
	p.saKeyFile = filepath.Join(dir, "sa.key")
	p.saPubFile = filepath.Join(dir, "sa.pub")
	if err := keyutil.WriteKey(p.saKeyFile, saKeyPEM); err != nil {
		return fail("service account key", err)
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return fail("service account key", err)
	}

	if p.extCA, err = pki.NewCA("peerdiscovery-apiserver-ca"); err != nil {
		return fail("peerdiscovery-apiserver CA", err)
	}
	if p.extCAFile, _, err = p.extCA.Write(dir, "peerdiscovery-apiserver-ca", true); err != nil {
		return fail("peerdiscovery-apiserver CA", err)
	}
	ext, err := p.extCA.NewServingCert("peerdiscovery-apiserver",
		[]string{extServiceDNS, extServiceDNS + ".cluster.local", "peerdiscovery-apiserver.peerdiscovery", "peerdiscovery-apiserver"}, extIPs)
	if err != nil {
		return fail("peerdiscovery-apiserver serving certificate", err)
	}
	if p.extServingCert, p.extServingKey, err = ext.Write(dir, "peerdiscovery-apiserver", true); err != nil {
		return fail("peerdiscovery-apiserver serving certificate", err)
	}
	return p, nil
}

// kubeAPIServerCert issues and writes the serving certificate of one
// kube-apiserver.
func (p *clusterPKI) kubeAPIServerCert(name string, ips []net.IP) (certFile, keyFile string, err error) {
	kp, err := p.ca.NewServingCert(name, kubernetesDNSNames, ips)
	if err != nil {
		return "", "", fmt.Errorf("generating the serving certificate of %s: %w", name, err)
	}
	return kp.Write(p.dir, name, true)
}
