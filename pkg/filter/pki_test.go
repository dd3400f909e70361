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

package filter

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	testpki "sigs.k8s.io/peerdiscovery/test/pki"
	"testing"
)

// peerServerName is the name every kube-apiserver's serving certificate
// carries and the filter verifies (upstream's choice).
const peerServerName = "kubernetes.default.svc"

// frontProxyClientName is the CN of the proxy client certificate, as in
// --requestheader-allowed-names.
const frontProxyClientName = "front-proxy-client"

// testPKI is a control plane's certificates: the peer CA signs every
// kube-apiserver's serving certificate (for kubernetes.default.svc); the
// front-proxy CA signs the proxy client certificate the filter presents.
type testPKI struct {
	peerCA, frontProxyCA *testpki.CA
	serving              tls.Certificate

	dir                                   string
	peerCAFile, clientCertFile, clientKey string
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	p := &testPKI{
		peerCA:       testpki.NewCA(t, "peer-ca"),
		frontProxyCA: testpki.NewCA(t, "front-proxy-ca"),
		dir:          t.TempDir(),
	}
	_, _, p.serving = p.peerCA.Issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, []string{peerServerName}, []net.IP{net.ParseIP("127.0.0.1")})
	certPEM, keyPEM, _ := p.frontProxyCA.Issue(t, frontProxyClientName, x509.ExtKeyUsageClientAuth, nil, nil)
	p.peerCAFile = filepath.Join(p.dir, "peer-ca.crt")
	p.clientCertFile = filepath.Join(p.dir, "proxy-client.crt")
	p.clientKey = filepath.Join(p.dir, "proxy-client.key")
	writeFile(t, p.peerCAFile, p.peerCA.CertPEM)
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
		ClientCAs:    p.frontProxyCA.Pool(),
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
}
