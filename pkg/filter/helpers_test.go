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
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	endpointsfilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

const selfID = "apiserver-self"

var (
	podsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	crdGVR     = schema.GroupVersionResource{Group: "crd.example.com", Version: "v1", Resource: "things"}
)

// testSerializer is what the aggregator's generic config gives the filter
// for error bodies: a codec factory that knows metav1.Status.
var testSerializer = func() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s)
}()

// alice is the authenticated user of most requests: a name, a UID,
// several groups and extra keys, one of which needs escaping in a header.
func alice() *user.DefaultInfo {
	return &user.DefaultInfo{
		Name:   "alice",
		UID:    "uid-alice-1",
		Groups: []string{"devs", "system:authenticated"},
		Extra: map[string][]string{
			"scopes":                       {"read", "write"},
			"authentication.k8s.io/pod-id": {"pod-1"},
		},
	}
}

// localChain is the rest of kube-apiserver's handler chain: it answers 404
// (it serves none of the test's peer-only resources) and records the call.
type localChain struct {
	calls atomic.Int32
	mu    sync.Mutex
	paths []string
	// respond, when set, answers instead of the 404.
	respond atomic.Pointer[http.HandlerFunc]
}

func (l *localChain) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.calls.Add(1)
	l.mu.Lock()
	l.paths = append(l.paths, r.URL.Path)
	l.mu.Unlock()
	if h := l.respond.Load(); h != nil {
		(*h)(w, r)
		return
	}
	w.Header().Set("X-Served-By", "local")
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "local chain: 404 page not found")
}

// env is one kube-apiserver with the filter ("self"), its local chain and a
// front HTTP server that plays the outer filters: it sets the RequestInfo
// (parsed as kube-apiserver does) and the authenticated user.
type env struct {
	t       testing.TB
	pki     *testPKI
	f       *Filter
	handler http.Handler
	local   *localChain
	front   *httptest.Server
	client  *http.Client
	user    atomic.Pointer[user.DefaultInfo]
	// audits holds the audit context of every request, by Audit-ID.
	audits   sync.Map // string -> *audit.AuditContext
	auditSeq atomic.Int64
}

type envOption func(*envConfig)

type envConfig struct {
	frontHTTP2    bool
	headerTimeout time.Duration
	http2         *PeerHTTP2
}

// peerHTTP2 sets Options.PeerHTTP2.
func peerHTTP2(h PeerHTTP2) envOption {
	return func(c *envConfig) { c.http2 = &h }
}

// peerHeaderTimeout sets Options.PeerResponseHeaderTimeout.
func peerHeaderTimeout(d time.Duration) envOption {
	return func(c *envConfig) { c.headerTimeout = d }
}

// frontHTTP2 serves the front over TLS with HTTP/2, as kube-apiserver does
// for most clients.
func frontHTTP2(c *envConfig) { c.frontHTTP2 = true }

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	var cfg envConfig
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{t: t, pki: newTestPKI(t), local: &localChain{}}
	e.user.Store(alice())
	f, err := New(Options{
		PeerCAFile:          e.pki.peerCAFile,
		ProxyClientCertFile: e.pki.clientCertFile,
		ProxyClientKeyFile:  e.pki.clientKey,
		PeerAdvertiseIP:     "127.0.0.1",
		PeerAdvertisePort:   "6443",

		PeerResponseHeaderTimeout: cfg.headerTimeout,
		PeerHTTP2:                 cfg.http2,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.f = f
	e.handler = f.WrapHandler(e.local, &genericapiserver.Config{APIServerID: selfID, Serializer: testSerializer})
	// The state a synced filter has: its own discovery and the routes.
	e.setLocal(podsGVR)
	e.setRoutes()
	f.views.Routes.SetSynced(true)

	e.front = httptest.NewUnstartedServer(e.withAudit(withRequestInfoAndUser(e.handler, func() user.Info { return e.user.Load() })))
	e.front.Config.ErrorLog = log.New(io.Discard, "", 0)
	if cfg.frontHTTP2 {
		e.front.EnableHTTP2 = true
		e.front.StartTLS()
	} else {
		e.front.Start()
	}
	t.Cleanup(e.front.Close)
	e.client = e.front.Client()
	return e
}

// withAudit plays kube-apiserver's audit filter: an audit context per
// request with a fresh Audit-ID (or the client's), kept for the test.
func (e *env) withAudit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := audit.WithAuditContext(r.Context())
		id := r.Header.Get("Audit-Id")
		if id == "" {
			id = fmt.Sprintf("audit-%d", e.auditSeq.Add(1))
		}
		audit.WithAuditID(ctx, types.UID(id))
		e.audits.Store(id, audit.AuditContextFrom(ctx))
		w.Header().Set("Audit-Id", id)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// annotations are the audit annotations of the request with Audit-ID id.
func (e *env) annotations(id string) map[string]string {
	ac, ok := e.audits.Load(id)
	if !ok {
		e.t.Fatalf("no request with Audit-ID %q", id)
	}
	return ac.(*audit.AuditContext).GetEventAnnotations()
}

// withRequestInfoAndUser plays kube-apiserver's outer filters: request
// info, the user, and the default Cache-Control (WithCacheControl).
func withRequestInfoAndUser(h http.Handler, u func() user.Info) http.Handler {
	return endpointsfilters.WithCacheControl(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, err := routing.RequestInfoFactory.NewRequestInfo(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := apirequest.WithRequestInfo(r.Context(), info)
		ctx = apirequest.WithUser(ctx, u())
		h.ServeHTTP(w, r.WithContext(ctx))
	}))
}

// setLocal replaces this server's own discovery view.
func (e *env) setLocal(gvrs ...schema.GroupVersionResource) {
	prev := e.f.views.Local.Current()
	d := &views.LocalDoc{Served: routing.NewServed(gvrs)}
	if prev != nil {
		d.Generation = prev.Generation + 1
	}
	e.f.views.Local.SetDoc(d)
}

// setRoutes replaces the routing table; every server it lists is ready.
func (e *env) setRoutes(tables ...*v1alpha1.PeerRoutingTable) {
	e.f.views.Routes.SetTable(routing.NewTable(tables, apiServerPeers(tables)))
}

// order returns ids in the order the filter tries them.
func order(ids ...string) []string {
	var peers []v1alpha1.RoutingPeer
	for _, id := range ids {
		peers = append(peers, readyPeer(id, id+":1"))
	}
	tables := []*v1alpha1.PeerRoutingTable{route(widgetsGVR, peers...)}
	res := routing.Decide(&routing.Snapshot{Table: routing.NewTable(tables, apiServerPeers(tables)), Self: selfID, Local: routing.NewServed(nil)},
		routing.Request{IsResourceRequest: true, GVR: widgetsGVR}, time.Now())
	var out []string
	for _, c := range res.Candidates {
		out = append(out, c.ID)
	}
	return out
}

// do sends a request through the front server.
func (e *env) do(req *http.Request) *http.Response {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), time.Minute)
	e.t.Cleanup(cancel)
	resp, err := e.client.Do(req.WithContext(ctx))
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp
}

func (e *env) newRequest(method, path string, body io.Reader) *http.Request {
	e.t.Helper()
	req, err := http.NewRequest(method, e.front.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// resetUpstreamMetrics zeroes upstream's peer proxy counters, which the
// filter increments so dashboards keep working.
func resetUpstreamMetrics() { peerproxymetrics.Reset() }

// gaugeValue reads an unlabelled gauge from the legacy registry.
func gaugeValue(t *testing.T, name string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// counterValue reads a counter from the legacy registry (0 when absent).
func counterValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func timePtr(t time.Time) *time.Time { return &t }

// setClock makes the filter, and the proxy's checks before each attempt,
// read clk.
func (f *Filter) setClock(clk clock.WithTickerAndDelayedExecution) {
	f.clock = clk
	f.proxy.SetClock(clk)
}

func peerWithReady(id, endpoint string, status metav1.ConditionStatus, rv string) *v1alpha1.APIServerPeer {
	return &v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: id, ResourceVersion: rv},
		Spec:       v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: endpoint},
		Status: v1alpha1.APIServerPeerStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: status, Reason: "Test"},
		}},
	}
}
