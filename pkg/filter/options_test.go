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
	"context"
	"crypto/x509"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"

	testpki "sigs.k8s.io/peerdiscovery/test/pki"
)

func TestOptionsValidate(t *testing.T) {
	files := Options{PeerCAFile: "ca.crt", ProxyClientCertFile: "client.crt", ProxyClientKeyFile: "client.key"}
	with := func(change func(*Options)) Options {
		o := files
		change(&o)
		return o
	}
	cases := []struct {
		name string
		opts Options
		// want holds, for each expected error, substrings it must contain.
		want [][]string
	}{
		{name: "nothing set: disabled, valid", opts: Options{}},
		{name: "advertise flags alone: disabled, valid", opts: Options{PeerAdvertiseIP: "10.0.0.1", PeerAdvertisePort: "6443"}},
		{name: "peer advertise address", opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "10.0.0.1", "6443" })},
		{name: "IPv6 peer advertise address", opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "fd00::1", "443" })},
		{name: "fallback to --advertise-address and --secure-port", opts: with(func(o *Options) { o.AdvertiseAddress, o.SecurePort = "10.0.0.1", 6443 })},
		{name: "peer IP with --secure-port", opts: with(func(o *Options) { o.PeerAdvertiseIP, o.SecurePort = "10.0.0.1", 6443 })},
		{
			name: "CA without the proxy client certificate",
			opts: Options{PeerCAFile: "ca.crt", PeerAdvertiseIP: "10.0.0.1", PeerAdvertisePort: "6443"},
			want: [][]string{{"--proxy-client-cert-file", "--proxy-client-key-file", "required"}},
		},
		{
			name: "client certificate without its key",
			opts: Options{PeerCAFile: "ca.crt", ProxyClientCertFile: "client.crt", PeerAdvertiseIP: "10.0.0.1", PeerAdvertisePort: "6443"},
			want: [][]string{{"--proxy-client-key-file"}},
		},
		{
			// Every kubeadm cluster sets the aggregator's client
			// certificate; without --peer-ca-file the filter is off.
			name: "client certificate without the peer CA: disabled, valid",
			opts: Options{ProxyClientCertFile: "client.crt", ProxyClientKeyFile: "client.key", PeerAdvertiseIP: "10.0.0.1", PeerAdvertisePort: "6443"},
		},
		{
			name: "no endpoint at all",
			opts: files,
			want: [][]string{{"--peer-advertise-ip", "--peer-advertise-port", "--advertise-address", "--secure-port"}},
		},
		{
			name: "IP without a port",
			opts: with(func(o *Options) { o.PeerAdvertiseIP = "10.0.0.1" }),
			want: [][]string{{"--peer-advertise-port"}},
		},
		{
			name: "not an IP",
			opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "apiserver.example", "6443" }),
			want: [][]string{{"--peer-advertise-ip", `"apiserver.example"`, "not an IP address"}},
		},
		{
			name: "unspecified peer IP",
			opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "0.0.0.0", "6443" }),
			want: [][]string{{"--peer-advertise-ip", `"0.0.0.0"`, "specific address"}},
		},
		{
			name: "unspecified --advertise-address",
			opts: with(func(o *Options) { o.AdvertiseAddress, o.SecurePort = "::", 6443 }),
			want: [][]string{{"--peer-advertise-ip", `"::"`, "specific address"}},
		},
		{
			name: "port not a number",
			opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "10.0.0.1", "https" }),
			want: [][]string{{"--peer-advertise-port", `"https"`, "1-65535"}},
		},
		{
			name: "port 0",
			opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "10.0.0.1", "0" }),
			want: [][]string{{"--peer-advertise-port", `"0"`}},
		},
		{
			name: "port too large",
			opts: with(func(o *Options) { o.PeerAdvertiseIP, o.PeerAdvertisePort = "10.0.0.1", "65536" }),
			want: [][]string{{"--peer-advertise-port", `"65536"`}},
		},
		{
			name: "everything wrong at once",
			opts: Options{PeerCAFile: "ca.crt", PeerAdvertiseIP: "nope", PeerAdvertisePort: "-1"},
			want: [][]string{
				{"--proxy-client-cert-file"},
				{"--peer-advertise-ip", `"nope"`},
				{"--peer-advertise-port", `"-1"`},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.opts.Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(tc.want))
			}
			for i, subs := range tc.want {
				for _, s := range subs {
					if !strings.Contains(errs[i].Error(), s) {
						t.Errorf("error %d %q does not contain %q", i, errs[i], s)
					}
				}
			}
			// New refuses what Validate refuses, and names the flags too.
			if len(tc.want) > 0 {
				_, err := New(tc.opts)
				if err == nil || !strings.Contains(err.Error(), tc.want[0][0]) {
					t.Errorf("New: %v", err)
				}
			}
		})
	}
}

// TestDisabledWithoutPeerCA: a kube-apiserver with the aggregator's proxy
// client certificate and no --peer-ca-file starts with the filter off,
// passes every request through and says so in a metric.
func TestDisabledWithoutPeerCA(t *testing.T) {
	f, err := New(Options{ProxyClientCertFile: "/nonexistent/client.crt", ProxyClientKeyFile: "/nonexistent/client.key"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if f.opts.Enabled() || f.proxy != nil {
		t.Fatal("filter enabled without --peer-ca-file")
	}
	if v := gaugeValue(t, "peerdiscovery_filter_enabled"); v != 0 {
		t.Fatalf("peerdiscovery_filter_enabled = %v, want 0", v)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	rec := httptest.NewRecorder()
	f.WrapHandler(next, &genericapiserver.Config{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("disabled filter answered %d itself", rec.Code)
	}
	if err := f.PostStartHook(genericapiserver.PostStartHookContext{}); err != nil {
		t.Fatalf("PostStartHook of a disabled filter: %v", err)
	}
	newEnv(t)
	if v := gaugeValue(t, "peerdiscovery_filter_enabled"); v != 1 {
		t.Fatalf("peerdiscovery_filter_enabled = %v after an enabled New, want 1", v)
	}
}

func TestNewFileErrors(t *testing.T) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	garbage := filepath.Join(dir, "garbage")
	writeFile(t, garbage, []byte("not PEM"))
	base := Options{
		PeerCAFile: pki.peerCAFile, ProxyClientCertFile: pki.clientCertFile, ProxyClientKeyFile: pki.clientKey,
		PeerAdvertiseIP: "127.0.0.1", PeerAdvertisePort: "6443",
	}
	for _, tc := range []struct {
		name   string
		change func(*Options)
		flag   string
	}{
		{"missing CA file", func(o *Options) { o.PeerCAFile = missing }, "--peer-ca-file"},
		{"CA file without certificates", func(o *Options) { o.PeerCAFile = garbage }, "--peer-ca-file"},
		{"missing client certificate", func(o *Options) { o.ProxyClientCertFile = missing }, "--proxy-client-cert-file"},
		{"missing client key", func(o *Options) { o.ProxyClientKeyFile = missing }, "--proxy-client-key-file"},
		{"client key of another certificate", func(o *Options) { o.ProxyClientKeyFile = garbage }, "--proxy-client-key-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.change(&o)
			_, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("New: %v, want an error naming %s", err, tc.flag)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		f, err := New(base)
		if err != nil {
			t.Fatal(err)
		}
		if f.endpoint != "127.0.0.1:6443" || f.opts.PeerServerName != peerServerName || f.opts.RetryAfterSeconds != 1 || f.opts.SyncGracePeriod != time.Minute {
			t.Fatalf("defaults: %+v, endpoint %s", f.opts, f.endpoint)
		}
		if got := f.ReadyzCheck().Name(); got != "peerdiscovery-filter" {
			t.Fatalf("readyz check name %q", got)
		}
		if f.Synced() {
			t.Fatal("a new filter must not be synced")
		}
	})
}

// TestCertificateReload: rotating --peer-ca-file builds a new transport that
// trusts the new CA only; rotating the proxy client certificate is used by
// the next connection.
func TestCertificateReload(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e.f.proxy.Run(ctx)

	oldPeer := e.newPeer(nil)
	newCA := testpki.NewCA(t, "peer-ca-2")
	_, _, newServing := newCA.Issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, []string{peerServerName}, []net.IP{net.ParseIP("127.0.0.1")})
	newPeer := newTestPeer(t, e.pki, newServing, nil)
	e.setLocal()
	get := func() int {
		resp := e.do(e.newRequest("GET", "/apis/example.com/v1/widgets", nil))
		readBody(t, resp)
		return resp.StatusCode
	}

	// Before: the old CA's peer is trusted, the new one's is not.
	e.setRoutes(route(widgetsGVR, readyPeer("old", oldPeer.endpoint())))
	if code := get(); code != 200 {
		t.Fatalf("old peer before the rotation: %d", code)
	}
	e.setRoutes(route(widgetsGVR, readyPeer("new", newPeer.endpoint())))
	if code := get(); code != 503 {
		t.Fatalf("new peer before the rotation: %d, want 503 (untrusted)", code)
	}

	before := e.f.proxy.TransportsID()
	writeFile(t, e.pki.peerCAFile, newCA.CertPEM)
	eventually(t, "a new transport after the CA file changed", func() bool { return e.f.proxy.TransportsID() != before })

	if code := get(); code != 200 {
		t.Fatalf("new peer after the rotation: %d", code)
	}
	if n := len(newPeer.requests()); n != 1 {
		t.Fatalf("new peer got %d requests", n)
	}
	e.setRoutes(route(widgetsGVR, readyPeer("old", oldPeer.endpoint())))
	if code := get(); code != 503 {
		t.Fatalf("old peer after the rotation: %d, want 503 (no longer trusted)", code)
	}

	// A CA file that no longer holds a certificate keeps the last good CA.
	// The reload attempt is made here, synchronously, with the function
	// the file watcher runs on a change (RunOnce: loadCABundle), so the
	// assertions below come after it, not before a watcher that has not
	// looked at the file yet.
	current := e.f.proxy.TransportsID()
	writeFile(t, e.pki.peerCAFile, []byte("garbage"))
	if err := caReloader(e).RunOnce(ctx); err == nil {
		t.Fatal("reloading a CA file without a certificate succeeded")
	}
	if got := caReloader(e).CurrentCABundleContent(); string(got) != string(newCA.CertPEM) {
		t.Fatalf("after a bad CA file the CA bundle is %q, want the last good one", got)
	}
	e.setRoutes(route(widgetsGVR, readyPeer("new", newPeer.endpoint())))
	if code := get(); code != 200 || e.f.proxy.TransportsID() != current {
		t.Fatalf("after a bad CA file: %d, transport replaced %v", code, e.f.proxy.TransportsID() != current)
	}
	// The file watcher has seen the bad file too once it has seen a later
	// good one (the same CA, written differently so that it counts as a
	// change): by then its own attempt at the bad file left nothing behind.
	writeFile(t, e.pki.peerCAFile, append(append([]byte{}, newCA.CertPEM...), '\n'))
	eventually(t, "a new transport after a good CA file followed the bad one", func() bool { return e.f.proxy.TransportsID() != current })
	if code := get(); code != 200 {
		t.Fatalf("after a good CA file followed the bad one: %d", code)
	}

	// Client certificate rotation: the next connection presents the new one.
	certPEM, keyPEM, _ := e.pki.frontProxyCA.Issue(t, "front-proxy-client-2", x509.ExtKeyUsageClientAuth, nil, nil)
	tmpCert, tmpKey := e.pki.clientCertFile+".tmp", e.pki.clientKey+".tmp"
	writeFile(t, tmpCert, certPEM)
	writeFile(t, tmpKey, keyPEM)
	if err := os.Rename(tmpKey, e.pki.clientKey); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmpCert, e.pki.clientCertFile); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new client certificate loaded", func() bool {
		c, _ := certReloader(e).CurrentCertKeyContent()
		return string(c) == string(certPEM)
	})
	third := newTestPeer(t, e.pki, newServing, nil)
	e.setRoutes(route(widgetsGVR, readyPeer("third", third.endpoint())))
	get()
	if seen := third.requests(); len(seen) != 1 || seen[0].ClientCN != "front-proxy-client-2" {
		t.Fatalf("third peer saw %+v, want the rotated client certificate", seen)
	}
}

func caReloader(e *env) *dynamiccertificates.DynamicFileCAContent {
	ca, _ := e.f.proxy.Certificates()
	return ca
}

func certReloader(e *env) *dynamiccertificates.DynamicCertKeyPairContent {
	_, c := e.f.proxy.Certificates()
	return c
}
