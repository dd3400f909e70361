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
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
)

// seenRequest is what a peer received.
type seenRequest struct {
	Method, Path, RawQuery, Host, Proto string
	Header                              http.Header
	Body                                string
	ClientCN                            string
	// User is who the peer's request-header authenticator (front-proxy
	// CA, allowed name front-proxy-client) says sent the request.
	User    user.Info
	AuthErr error
}

// testPeer is a peer kube-apiserver: real TLS with a serving certificate
// from the peer CA, client certificates required and verified against the
// front-proxy CA, identity read by upstream's request-header authenticator.
type testPeer struct {
	*httptest.Server
	mu      sync.Mutex
	seen    []seenRequest
	respond http.HandlerFunc
}

func (e *env) newPeer(respond http.HandlerFunc) *testPeer {
	return newTestPeer(e.t, e.pki, e.pki.serving, respond)
}

func newTestPeer(t testing.TB, pki *testPKI, serving tls.Certificate, respond http.HandlerFunc) *testPeer {
	t.Helper()
	p := newUnstartedTestPeer(t, pki, serving, respond)
	p.StartTLS()
	return p
}

// newUnstartedPeer is newPeer before StartTLS, for a test to change its
// server settings first.
func (e *env) newUnstartedPeer(respond http.HandlerFunc) *testPeer {
	return newUnstartedTestPeer(e.t, e.pki, e.pki.serving, respond)
}

func newUnstartedTestPeer(t testing.TB, pki *testPKI, serving tls.Certificate, respond http.HandlerFunc) *testPeer {
	t.Helper()
	p := &testPeer{respond: respond}
	auth := requestHeaderAuthenticator(pki)
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s := seenRequest{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Host: r.Host, Proto: r.Proto,
			Header: r.Header.Clone(), Body: string(body),
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			s.ClientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		// The authenticator clears the headers it reads: give it a copy.
		ar := r.Clone(r.Context())
		resp, ok, err := auth.AuthenticateRequest(ar)
		switch {
		case err != nil:
			s.AuthErr = err
		case ok:
			s.User = resp.User
		}
		p.mu.Lock()
		p.seen = append(p.seen, s)
		p.mu.Unlock()
		if p.respond != nil {
			p.respond(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Widget"}`)
	}))
	p.EnableHTTP2 = true
	p.TLS = pki.peerTLSConfig(serving)
	p.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(p.Close)
	return p
}

func requestHeaderAuthenticator(pki *testPKI) authenticator.Request {
	roots := pki.frontProxyCA.Pool()
	return headerrequest.NewDynamicVerifyOptionsSecure(
		func() (x509.VerifyOptions, bool) {
			return x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
		},
		headerrequest.StaticStringSlice{frontProxyClientName},
		headerrequest.StaticStringSlice{"X-Remote-User"},
		headerrequest.StaticStringSlice{"X-Remote-Uid"},
		headerrequest.StaticStringSlice{"X-Remote-Group"},
		headerrequest.StaticStringSlice{"X-Remote-Extra-"},
	)
}

func (p *testPeer) endpoint() string { return p.Listener.Addr().String() }

func (p *testPeer) requests() []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenRequest(nil), p.seen...)
}

// closedEndpoint is a loopback address nothing listens on: connections to
// it are refused.
func closedEndpoint(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// cutEndpoint returns the address of a listener that accepts each
// connection and closes it at once: a peer that can be connected to but
// does not answer (not refused).
func cutEndpoint(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}

// remoteHeaders returns every X-Remote-* header.
func remoteHeaders(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-remote-") {
			out[k] = v
		}
	}
	return out
}

// wantIdentity is what a peer must see for alice, header by header.
var wantIdentity = http.Header{
	"X-Remote-User":         {"alice"},
	"X-Remote-Uid":          {"uid-alice-1"},
	"X-Remote-Group":        {"devs", "system:authenticated"},
	"X-Remote-Extra-Scopes": {"read", "write"},
	// The key is %-escaped as upstream's authenticating proxy does; the
	// peer's authenticator unescapes it.
	"X-Remote-Extra-Authentication.k8s.io%2fpod-Id": {"pod-1"},
}

// checkProxiedAsAlice checks that a request reached a peer as a
// kube-apiserver proxying for alice: client certificate verified, identity
// headers from the context user only, loop header set.
func checkProxiedAsAlice(t *testing.T, s seenRequest) {
	t.Helper()
	if s.ClientCN != frontProxyClientName {
		t.Errorf("peer saw client certificate CN %q, want %q", s.ClientCN, frontProxyClientName)
	}
	if got := remoteHeaders(s.Header); !reflect.DeepEqual(got, wantIdentity) {
		t.Errorf("peer saw identity headers\n%v\nwant\n%v", got, wantIdentity)
	}
	if got := s.Header.Get(PeerProxiedHeader); got != "true" {
		t.Errorf("%s = %q, want true", PeerProxiedHeader, got)
	}
	if s.AuthErr != nil || s.User == nil {
		t.Fatalf("peer's request-header authenticator: user %v, err %v", s.User, s.AuthErr)
	}
	want := alice()
	if s.User.GetName() != want.Name || s.User.GetUID() != want.UID ||
		!reflect.DeepEqual(s.User.GetGroups(), want.Groups) || !reflect.DeepEqual(s.User.GetExtra(), want.Extra) {
		t.Errorf("peer authenticated %#v, want %#v", s.User, want)
	}
}
