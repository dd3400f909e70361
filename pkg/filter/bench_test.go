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

// Benchmarks of the filter's two paths side by side with upstream's built-in
// peer proxy (k8s.io/apiserver/pkg/util/peerproxy), in the same run, on the
// same requests, the same loopback TLS peer and the same certificates.
//
// Upstream's handler is built only through its exported API, as
// kube-apiserver builds it (upstream's controlplane/apiserver.BuildPeerProxy,
// and the post-start hooks controlplane/apiserver's completedConfig.New adds
// for it):
//   - NewPeerProxyHandler with a Lease informer from a fake clientset holding
//     one peer identity Lease (label apiserver.kubernetes.io/identity=
//     kube-apiserver), a transport.Config with the peer CA and the
//     front-proxy client certificate (ServerName kubernetes.default.svc), and
//     a loopback rest.Config pointing at a small HTTP server that answers
//     this server's own /api and /apis (aggregated v2);
//   - its local discovery cache is filled by RunLocalDiscoveryCacheSync (a
//     real discovery client call to that loopback server);
//   - its peer cache by RunPeerDiscoveryCacheSync + RunPeerDiscoveryRefilter:
//     the Lease event makes it fetch the peer's discovery through its own
//     proxy, over TLS, from the same peer the requests go to;
//   - the peer's endpoint comes from a PeerEndpointLeaseReconciler. The real
//     one reads etcd on every proxied request; this one answers from a map,
//     which only makes upstream faster than it is in a real kube-apiserver.
//   - WaitForCacheSync marks it synced.
// klog output is discarded during benchmarks (upstream logs every proxied
// request at level 0; formatting it is still paid).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/peerproxy"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

const (
	benchPeerID      = "apiserver-peer-1"
	identityLeaseSel = "apiserver.kubernetes.io/identity=kube-apiserver"
	peerAnswer       = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"ns1"}}`
)

var quietKlogOnce sync.Once

// quietKlog discards klog output for both handlers.
func quietKlog() {
	quietKlogOnce.Do(func() {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("alsologtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	})
}

// discoveryServer answers /api and /apis with aggregated discovery, other
// paths with a small JSON object.
func discoveryServer(api, apis []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api":
			w.Header().Set("Content-Type", discovery.AcceptV2)
			_, _ = w.Write(api)
		case "/apis":
			w.Header().Set("Content-Type", discovery.AcceptV2)
			_, _ = w.Write(apis)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, peerAnswer)
		}
	}
}

// memReconciler is a PeerEndpointLeaseReconciler answering from memory.
type memReconciler struct{ endpoints map[string]string }

func (m *memReconciler) GetEndpoint(id string) (string, error) {
	if ep, ok := m.endpoints[id]; ok {
		return ep, nil
	}
	return "", fmt.Errorf("no endpoint for %s", id)
}
func (m *memReconciler) UpdateLease(string, string, []corev1.EndpointPort) error { return nil }
func (m *memReconciler) RemoveLease(string) error                                { return nil }
func (m *memReconciler) Destroy()                                                {}
func (m *memReconciler) StopReconciling()                                        {}

// benchSetup is one kube-apiserver ("self") serving pods and apps, and one
// peer serving pods and example.com/v1 widgets, with both filters built.
type benchSetup struct {
	ours, upstream http.Handler
	peer           *httptest.Server
}

func newBenchSetup(b testing.TB, next http.Handler) *benchSetup {
	b.Helper()
	pki := newTestPKI(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)

	core := dgroup("", "v1", "pods")
	peer := startBenchPeer(b, pki, discoveryServer(discoveryJSON(core), discoveryJSON(dgroup("example.com", "v1", "widgets"))))
	loopback := httptest.NewServer(discoveryServer(discoveryJSON(core), discoveryJSON(dgroup("apps", "v1", "deployments"))))
	b.Cleanup(loopback.Close)
	peerEndpoint := peer.Listener.Addr().String()

	// Ours, in the state its informers give it.
	f := newBenchFilter(b, pki)
	ours := f.WrapHandler(next, &genericapiserver.Config{APIServerID: selfID, Serializer: testSerializer})
	f.views.Local.SetDoc(&views.LocalDoc{Served: routing.NewServed([]schema.GroupVersionResource{podsGVR, {Group: "apps", Version: "v1", Resource: "deployments"}})})
	tables := []*v1alpha1.PeerRoutingTable{
		route(podsGVR, readyPeer(selfID, "127.0.0.1:6443"), readyPeer(benchPeerID, peerEndpoint)),
		route(widgetsGVR, readyPeer(benchPeerID, peerEndpoint)),
	}
	f.views.Routes.SetTable(routing.NewTable(tables, apiServerPeers(tables)))
	f.views.Routes.SetSynced(true)

	// Upstream's, fed through its exported API.
	holder := benchPeerID
	clientset := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: benchPeerID, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	})
	factory := informers.NewSharedInformerFactory(clientset, 0)
	up, err := peerproxy.NewPeerProxyHandler(selfID, identityLeaseSel, factory.Coordination().V1().Leases(),
		&memReconciler{endpoints: map[string]string{benchPeerID: peerEndpoint}}, testSerializer,
		&rest.Config{Host: loopback.URL},
		&transport.Config{TLS: transport.TLSConfig{
			CAFile: pki.peerCAFile, CertFile: pki.clientCertFile, KeyFile: pki.clientKey, ServerName: peerServerName,
		}})
	if err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	if err := up.RunLocalDiscoveryCacheSync(ctx.Done()); err != nil {
		b.Fatal(err)
	}
	go up.RunPeerDiscoveryCacheSync(ctx, 1)
	go up.RunPeerDiscoveryRefilter(ctx)
	if err := up.WaitForCacheSync(ctx.Done()); err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(up.GetPeerResources()[benchPeerID]) > 0, nil
	})
	if err != nil {
		b.Fatalf("upstream's peer discovery cache never filled: %v", err)
	}
	return &benchSetup{ours: ours, upstream: up.WrapHandler(next), peer: peer}
}

// benchWriter is a ResponseWriter that keeps the status and discards the
// body; it flushes like the server's writers.
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }
func (w *benchWriter) Flush()                      {}

func (w *benchWriter) reset() {
	clear(w.h)
	w.code = 0
}

// benchRequest is a request as the outer filters hand it on.
// startBenchPeer starts a loopback peer as kube-apiserver serves: TLS with
// the peer serving certificate, HTTP/2, client certificates required.
func startBenchPeer(b testing.TB, pki *testPKI, h http.Handler) *httptest.Server {
	peer := httptest.NewUnstartedServer(h)
	peer.EnableHTTP2 = true
	peer.TLS = pki.peerTLSConfig(pki.serving)
	peer.StartTLS()
	b.Cleanup(peer.Close)
	return peer
}

// newBenchFilter is an enabled filter trusting pki's peer CA.
func newBenchFilter(b testing.TB, pki *testPKI) *Filter {
	f, err := New(Options{
		PeerCAFile: pki.peerCAFile, ProxyClientCertFile: pki.clientCertFile, ProxyClientKeyFile: pki.clientKey,
		PeerAdvertiseIP: "127.0.0.1", PeerAdvertisePort: "6443",
	})
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func benchRequest(b testing.TB, path string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	info, err := routing.RequestInfoFactory.NewRequestInfo(req)
	if err != nil {
		b.Fatal(err)
	}
	return req.WithContext(apirequest.WithUser(apirequest.WithRequestInfo(req.Context(), info), alice()))
}

// BenchmarkLocalPath: a request for a GVR this server serves, through each
// filter to a trivial next handler.
func BenchmarkLocalPath(b *testing.B) {
	var served int
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.WriteHeader(http.StatusOK)
	})
	benchBoth(b, next, "/api/v1/namespaces/ns1/pods/p1", func(b *testing.B, h http.Handler, req *http.Request) {
		w := &benchWriter{h: http.Header{}}
		served = 0
		for b.Loop() {
			h.ServeHTTP(w, req)
		}
		if served == 0 || w.code != http.StatusOK {
			b.Fatalf("served locally %d times, last code %d", served, w.code)
		}
	})
}

// BenchmarkProxyPath: a GET proxied to a loopback TLS peer answering a small
// JSON body, through each filter, connections kept alive.
func BenchmarkProxyPath(b *testing.B) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})
	benchBoth(b, next, "/apis/example.com/v1/namespaces/ns1/widgets/w1", func(b *testing.B, h http.Handler, req *http.Request) {
		w := &benchWriter{h: http.Header{}}
		for b.Loop() {
			w.reset()
			h.ServeHTTP(w, req)
			if w.code != http.StatusOK {
				b.Fatalf("proxied: status %d", w.code)
			}
		}
	})
}

// benchBoth runs one sub-benchmark per filter, ours then upstream's, on
// the same request for path, so that one run gives both figures (their
// ratio is what to compare).
func benchBoth(b *testing.B, next http.Handler, path string, run func(b *testing.B, h http.Handler, req *http.Request)) {
	quietKlog()
	s := newBenchSetup(b, next)
	req := benchRequest(b, path)
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"ours", s.ours}, {"upstream", s.upstream}} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			run(b, h.h, req)
		})
	}
}

// TestBenchHandlersAgree checks the comparison's premises on every test
// run: both handlers serve pods locally and proxy widgets to the peer.
func TestBenchHandlersAgree(t *testing.T) {
	var local int
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local++
		w.WriteHeader(http.StatusTeapot)
	})
	s := newBenchSetup(t, next)
	for name, h := range map[string]http.Handler{"ours": s.ours, "upstream": s.upstream} {
		local = 0
		w := &benchWriter{h: http.Header{}}
		h.ServeHTTP(w, benchRequest(t, "/api/v1/namespaces/ns1/pods/p1"))
		if local != 1 || w.code != http.StatusTeapot {
			t.Fatalf("%s: pods not served locally: %d, %d", name, local, w.code)
		}
		w.reset()
		h.ServeHTTP(w, benchRequest(t, "/apis/example.com/v1/namespaces/ns1/widgets/w1"))
		if local != 1 || w.code != http.StatusOK || w.h.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: widgets not proxied: %d, %d %v", name, local, w.code, w.h)
		}
	}
}
