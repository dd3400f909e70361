package filter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	endpointsfilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
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
	})
	if err != nil {
		t.Fatal(err)
	}
	e.f = f
	e.handler = f.WrapHandler(e.local, &genericapiserver.Config{APIServerID: selfID, Serializer: testSerializer})
	// The state a synced filter has: its own discovery and the routes.
	e.setLocal(podsGVR)
	e.setRoutes()
	f.state.isSynced.Store(true)

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
	set := make(map[schema.GroupVersionResource]struct{}, len(gvrs))
	for _, g := range gvrs {
		set[g] = struct{}{}
	}
	prev := e.f.local.doc.Load()
	d := &localDoc{gvrs: set}
	if prev != nil {
		d.generation = prev.generation + 1
	}
	e.f.local.doc.Store(d)
}

// setRoutes replaces the routing table.
func (e *env) setRoutes(tables ...*v1alpha1.PeerRoutingTable) {
	e.f.state.current.Store(routing.NewTable(tables, nil))
}

// route is the routing table of one GVR.
func route(g schema.GroupVersionResource, peers ...v1alpha1.RoutingPeer) *v1alpha1.PeerRoutingTable {
	t := &v1alpha1.PeerRoutingTable{
		ObjectMeta: metav1.ObjectMeta{Name: g.Resource + "." + g.Version + "." + g.Group},
		Spec:       v1alpha1.PeerRoutingTableSpec{Group: g.Group, Version: g.Version, Resource: g.Resource},
	}
	t.Status.Peers = peers
	return t
}

func readyPeer(id, endpoint string) v1alpha1.RoutingPeer {
	return v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpoint, Ready: true}
}

// order returns ids in the order the filter tries them.
func order(ids ...string) []string {
	var peers []v1alpha1.RoutingPeer
	for _, id := range ids {
		peers = append(peers, readyPeer(id, id+":1"))
	}
	res := routing.Decide(routing.NewTable([]*v1alpha1.PeerRoutingTable{route(widgetsGVR, peers...)}, nil),
		routing.Request{IsResourceRequest: true, GVR: widgetsGVR}, selfID, nil)
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

// eventually polls cond until it holds; it fails the test after a long
// deadline that only a broken filter reaches.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
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
