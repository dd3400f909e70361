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

package server

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"sigs.k8s.io/peerdiscovery/internal/testrelay"
)

// streamThenFreeze opens a streaming GET through a relay with a client
// built from cfg, freezes the relay once the headers are in, and
// returns how the body read ended: its error, or errStillBlocked when it
// was still waiting after wait.
func streamThenFreeze(t *testing.T, wrap func(*rest.Config), wait time.Duration) error {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	// A certificate of its own: client-go shares a transport among clients
	// of equal TLS settings, and httptest's is always the same.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("example.com", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	relay := testrelay.New(t, srv.Listener.Addr().String())

	cfg := &rest.Config{Host: "https://" + relay.Addr(), TLSClientConfig: rest.TLSClientConfig{
		CAData:     certPEM,
		ServerName: "example.com",
	}}
	wrap(cfg)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(cfg.Host + "/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.ProtoMajor != 2 {
		t.Fatalf("the client speaks %s, want HTTP/2", resp.Proto)
	}
	relay.Freeze()
	read := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); read <- err }()
	select {
	case err := <-read:
		return err
	case <-time.After(wait):
		return errStillBlocked
	}
}

var errStillBlocked = errors.New("still blocked")

// TestHealthCheckEndsAFrozenConnection: with withHealthCheck, a client-go
// client's stream over a connection that stops carrying anything ends
// after the ping and its timeout; without it, client-go's default
// (30 s + 15 s) still has it waiting.
func TestHealthCheckEndsAFrozenConnection(t *testing.T) {
	unsetHealthCheckEnvironment(t)
	check := withHealthCheck(http.HTTP2Config{SendPingTimeout: time.Second, PingTimeout: time.Second})
	if check == nil {
		t.Fatal("withHealthCheck returned nothing with the environment unset")
	}
	start := time.Now()
	err := streamThenFreeze(t, func(c *rest.Config) { c.Wrap(check) }, 15*time.Second)
	if err == nil || errors.Is(err, errStillBlocked) {
		t.Fatalf("with a 1 s + 1 s health check, the frozen stream ended with %v after %v", err, time.Since(start))
	}
	t.Logf("with 1 s + 1 s: ended after %v: %v", time.Since(start).Round(100*time.Millisecond), err)

	if err := streamThenFreeze(t, func(*rest.Config) {}, 4*time.Second); !errors.Is(err, errStillBlocked) {
		t.Fatalf("without the health check the frozen stream ended with %v, want still blocked after 4 s", err)
	}
}

// unsetHealthCheckEnvironment unsets HTTP2_*_SECONDS for the test
// (t.Setenv restores them after it).
func unsetHealthCheckEnvironment(t *testing.T) {
	for _, k := range healthCheckEnvironment {
		t.Setenv(k, "")
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigGivesEveryClientTheHealthCheck: the delegated authentication
// and authorization clients and the engine's clients get it.
func TestConfigGivesEveryClientTheHealthCheck(t *testing.T) {
	unsetHealthCheckEnvironment(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// Nothing listens there: Config() makes no request that must succeed.
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: "https://127.0.0.1:1"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: "t"}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "c",
	}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	ro := o.RecommendedOptions
	ro.SecureServing.BindPort = 0
	ro.SecureServing.ServerCert.CertDirectory = t.TempDir()
	ro.CoreAPI.CoreAPIKubeconfigPath = kubeconfig
	ro.Authentication.RemoteKubeConfigFile = kubeconfig
	ro.Authentication.TolerateInClusterLookupFailure = true
	ro.Authorization.RemoteKubeConfigFile = kubeconfig
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	for name, wrap := range map[string]func(http.RoundTripper) http.RoundTripper{
		"authentication": ro.Authentication.CustomRoundTripperFn,
		"authorization":  ro.Authorization.CustomRoundTripperFn,
		"engine":         cfg.GenericConfig.ClientConfig.WrapTransport,
	} {
		var tr http.Transport
		if wrap == nil {
			t.Errorf("%s: no transport wrapper", name)
			continue
		}
		wrap(&tr)
		if tr.HTTP2 == nil || tr.HTTP2.SendPingTimeout != 5*time.Second || tr.HTTP2.PingTimeout != 3*time.Second {
			t.Errorf("%s: HTTP/2 config %+v, want a ping after 5 s, closed 3 s later", name, tr.HTTP2)
		}
	}
}

// TestHealthCheckLeavesTheEnvironmentItsSay: HTTP2_*_SECONDS, which every
// Kubernetes client reads, still tune this process's clients.
func TestHealthCheckLeavesTheEnvironmentItsSay(t *testing.T) {
	t.Setenv("HTTP2_PING_TIMEOUT_SECONDS", "7")
	if withHealthCheck(clientHealthCheck) != nil {
		t.Fatal("withHealthCheck overrides HTTP2_PING_TIMEOUT_SECONDS")
	}
}
