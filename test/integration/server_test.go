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

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/apiserver"
	"sigs.k8s.io/peerdiscovery/pkg/cmd/server"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	versioned "sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// testServer is peerdiscovery-apiserver running in this process.
type testServer struct {
	srv    *apiserver.Server
	clock  *clocktesting.FakeClock
	host   string
	caPEM  []byte
	cancel context.CancelFunc
	done   chan error
}

// startServer runs the server on a loopback port, delegating authn/authz to
// the real kube-apiserver, without the peer engine.
func startServer(t *testing.T) *testServer {
	t.Helper()
	needCluster(t)
	o := server.NewOptions()
	o.Engine = nil
	o.ShutdownDelay = 0 // no aggregator in front to move away from
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	ro := o.RecommendedOptions
	ro.SecureServing.Listener = ln
	ro.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	ro.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	ro.SecureServing.ServerCert.CertDirectory = certDir
	kubeconfig := cluster.Kubeconfig()
	ro.CoreAPI.CoreAPIKubeconfigPath = kubeconfig
	ro.Authentication.RemoteKubeConfigFile = kubeconfig
	ro.Authorization.RemoteKubeConfigFile = kubeconfig
	// Fail fast in tests rather than caching decisions across cases.
	ro.Authorization.AllowCacheTTL = 0
	ro.Authorization.DenyCacheTTL = 0
	ro.Authentication.CacheTTL = 0
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakeClock(time.Now())
	cfg.ExtraConfig.Clock = clock
	cfg.ExtraConfig.StaleAfter = time.Minute
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, clock: clock, host: "https://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.GenericAPIServer.PrepareRun().RunWithContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	if ts.caPEM, err = os.ReadFile(filepath.Join(certDir, "apiserver.crt")); err != nil {
		t.Fatal(err)
	}
	// Wait for the secure port and the delegated authn config (livez is
	// anonymous-allowed).
	planetest.WaitFor(t, 2*time.Minute, "server live", func() error {
		code, body := ts.get(t, ts.anonymous(), "/livez")
		if code != http.StatusOK {
			return fmt.Errorf("livez %d: %s", code, body)
		}
		return nil
	})
	// Client certificates work once the client CA from
	// extension-apiserver-authentication is loaded.
	planetest.WaitFor(t, 2*time.Minute, "client certificate authentication", func() error {
		if code, body := ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1"); code != http.StatusOK {
			return fmt.Errorf("%d: %s", code, body)
		}
		return nil
	})
	return ts
}

// config is a client config for our server as user (client certificate
// signed by the cluster CA, trusted through extension-apiserver-authentication).
func (ts *testServer) config(user string, groups ...string) *rest.Config {
	base := cluster.UserConfig(0, user, groups)
	base.Host = ts.host
	base.TLSClientConfig.CAData = ts.caPEM
	return base
}

func (ts *testServer) admin() *rest.Config {
	cfg := rest.CopyConfig(cluster.AdminConfig(0))
	cfg.Host = ts.host
	cfg.TLSClientConfig.CAData = ts.caPEM
	return cfg
}

func (ts *testServer) anonymous() *rest.Config {
	return &rest.Config{Host: ts.host, TLSClientConfig: rest.TLSClientConfig{CAData: ts.caPEM}}
}

func (ts *testServer) clientset(t *testing.T, cfg *rest.Config) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// get does a raw GET and returns the status code and body.
func (ts *testServer) get(t *testing.T, cfg *rest.Config, path string, headers ...string) (int, string) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, ts.host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			break
		}
	}
	return resp.StatusCode, string(buf)
}

// view builds a published state: peers a (v1.37) and b (v1.36); every
// resource of group "apps" is served by both, "resource.k8s.io/v1beta2" by
// a only, plus n extra routing tables.
func view(n int, bReady bool) compute.Output {
	res := func(name string, verbs ...string) apidiscoveryv2.APIResourceDiscovery {
		return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: verbs,
			ResponseKind: &metav1.GroupVersionKind{Kind: name}}
	}
	group := func(g, v string, rs ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIGroupDiscovery {
		return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: v, Resources: rs, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}}}
	}
	var extra []apidiscoveryv2.APIResourceDiscovery
	for i := 0; i < n; i++ {
		extra = append(extra, res(fmt.Sprintf("things%04d", i), "get", "list"))
	}
	now := time.Unix(1_800_000_000, 0)
	a := compute.Peer{ServerID: "kube-apiserver-a", Endpoint: "10.0.0.1:6443", BinaryVersion: "v1.37.2", Ready: true,
		ReadyReason: "DiscoverySynced", ReadyTransition: now, LastSyncTime: now, HasDocument: true,
		Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
		APIs: []apidiscoveryv2.APIGroupDiscovery{
			group("apps", "v1", res("deployments", "get", "list", "watch")),
			group("resource.k8s.io", "v1beta2", res("deviceclasses", "get", "list")),
			group("example.com", "v1", extra...),
		}}
	b := compute.Peer{ServerID: "kube-apiserver-b", Endpoint: "10.0.0.2:6443", BinaryVersion: "v1.36.3", Ready: bReady,
		ReadyReason: "DiscoverySynced", ReadyTransition: now, LastSyncTime: now, HasDocument: true,
		Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
		APIs:    []apidiscoveryv2.APIGroupDiscovery{group("apps", "v1", res("deployments", "get", "list", "watch"))}}
	if !bReady {
		b.ReadyReason = "ConnectionRefused"
	}
	out, err := compute.Compute(compute.Input{Peers: []compute.Peer{a, b}})
	if err != nil {
		panic(err)
	}
	return out
}
