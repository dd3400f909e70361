package filter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// proxier sends requests to peers over pooled transports: the peer CA
// verifies their serving certificates, the front-proxy client certificate
// proves that the X-Remote-* identity headers come from a kube-apiserver.
// Both files are reloaded when they change.
type proxier struct {
	ca         *dynamiccertificates.DynamicFileCAContent
	clientCert *dynamiccertificates.DynamicCertKeyPairContent
	serverName string
	// headerTimeout bounds the wait for a peer's response headers on
	// requests that are not long-running.
	headerTimeout time.Duration

	mu       sync.Mutex
	keyPair  *tls.Certificate
	keyBytes []byte

	transports atomic.Pointer[peerTransports]

	// proxies holds one reverse proxy per peer endpoint and kind of
	// request (a handful: one per kube-apiserver), built once. Building one
	// per request, as UpgradeAwareHandler does, costs allocations and a
	// 32 KiB copy buffer on every proxied request.
	proxies      sync.Map // proxyKey -> *httputil.ReverseProxy
	proxiesCount atomic.Int32
}

// peerTransports are the two connection pools to peers. They differ only in
// the response header timeout: a watch, a log stream or an exec may wait
// long for its first byte, any other request must not.
type peerTransports struct {
	short *http.Transport // not long-running: ResponseHeaderTimeout set
	long  *http.Transport // long-running (LongRunningFunc): no header timeout
}

func (t *peerTransports) pick(longRunning bool) *http.Transport {
	if longRunning {
		return t.long
	}
	return t.short
}

func newProxier(caFile, certFile, keyFile, serverName string, headerTimeout time.Duration) (*proxier, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", caFile)
	if err != nil {
		return nil, fmt.Errorf("--peer-ca-file: %w", err)
	}
	cert, err := dynamiccertificates.NewDynamicServingContentFromFiles("proxy-client", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err)
	}
	p := &proxier{ca: ca, clientCert: cert, serverName: serverName, headerTimeout: headerTimeout}
	if err := p.rebuildTransport(); err != nil {
		return nil, err
	}
	ca.AddListener(listenerFunc(func() {
		if err := p.rebuildTransport(); err != nil {
			klog.ErrorS(err, "peerdiscovery filter: reloading --peer-ca-file failed; keeping the previous CA")
		}
	}))
	return p, nil
}

type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }

// run starts the file watchers.
func (p *proxier) run(ctx context.Context) {
	go p.ca.Run(ctx, 1)
	go p.clientCert.Run(ctx, 1)
}

// rebuildTransport makes new pooled transports for the current CA;
// in-flight requests finish on the old ones.
func (p *proxier) rebuildTransport() error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.ca.CurrentCABundleContent()) {
		return fmt.Errorf("--peer-ca-file: no certificates found")
	}
	t := &peerTransports{short: p.newTransport(pool, p.headerTimeout), long: p.newTransport(pool, 0)}
	if old := p.transports.Swap(t); old != nil {
		// Idle connections verified against the old CA are dropped; busy
		// ones finish their request.
		time.AfterFunc(time.Minute, func() {
			old.short.CloseIdleConnections()
			old.long.CloseIdleConnections()
		})
	}
	return nil
}

// newTransport is one pool of connections to peers. apimachinery's
// SetTransportDefaults configures HTTP/2 with its connection health check
// (ReadIdleTimeout 30s, PingTimeout 15s, tunable with
// HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS as for
// every Kubernetes client): a peer that dies silently fails the requests
// multiplexed on its connection within their sum instead of holding them
// until the request deadline.
func (p *proxier) newTransport(pool *x509.CertPool, headerTimeout time.Duration) *http.Transport {
	t := utilnet.SetTransportDefaults(&http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion:           tls.VersionTLS12,
			RootCAs:              pool,
			ServerName:           p.serverName,
			GetClientCertificate: p.getClientCertificate,
			// HTTP/2 lets watches and requests share few connections.
			NextProtos: []string{"h2", "http/1.1"},
		},
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		MaxIdleConns:          200,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	})
	// Peers are reached directly, never through an HTTP proxy from the
	// environment (SetTransportDefaults would add one).
	t.Proxy = nil
	return t
}

func (p *proxier) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	certPEM, keyPEM := p.clientCert.CurrentCertKeyContent()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keyPair != nil && string(p.keyBytes) == string(certPEM)+string(keyPEM) {
		return p.keyPair, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("proxy client certificate: %w", err)
	}
	p.keyPair, p.keyBytes = &pair, append(append([]byte{}, certPEM...), keyPEM...)
	return p.keyPair, nil
}

// Audit annotations on the source server's event, so that one request can
// be followed across servers (the peer's event has the same Audit-ID).
const (
	AuditDecision   = "peerdiscovery.k8s.io/decision"
	AuditProxiedTo  = "peerdiscovery.k8s.io/proxied-to"
	AuditFailedOver = "peerdiscovery.k8s.io/failed-over-from"
	AuditError      = "peerdiscovery.k8s.io/error"
)

// serve proxies r to the first candidate that takes it. Whether a try may
// have reached the peer is read from the transport (httptrace: the request
// headers were written), never guessed from error types:
//
//   - not reached: the next candidate is tried, writes included; when none
//     can be reached the answer is 503 with Retry-After (nothing happened,
//     so a client retry is safe);
//   - reached, GET or HEAD, no response byte written: the next candidate is
//     tried (a safe method: repeating it changes nothing);
//   - reached, any other method: never sent again, and answered 502 (504
//     on a timeout) without Retry-After, so no client replays it either.
func (p *proxier) serve(w http.ResponseWriter, r *http.Request, res routing.Result, s runtime.NegotiatedSerializer, retryAfter int, longRunning bool) {
	ctx := r.Context()
	u, ok := apirequest.UserFrom(ctx)
	if !ok {
		responsewriters.InternalError(w, r, errors.New("no user in the request context"))
		return
	}
	start := time.Now()
	body := &replayableBody{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	upgrade := httpstream.IsUpgradeRequest(r)
	audit.AddAuditAnnotation(ctx, AuditDecision, string(v1alpha1.RouteProxy))
	// The peer's Cache-Control is the answer's (an OpenAPI document at its
	// hash is immutable): the reverse proxy adds response headers to those
	// already set, and the chain's default (WithCacheControl's "no-cache,
	// private") would go out beside it. An answer of this server's own
	// gets the default back.
	chainCacheControl := w.Header().Values("Cache-Control")
	w.Header().Del("Cache-Control")
	var tried []string // candidates that failed before the current one
	for _, peer := range res.Candidates {
		tw := &trackingWriter{ResponseWriter: w}
		var reached bool
		if upgrade {
			p.serveUpgrade(tw, r, peer.Endpoint, u)
			// UpgradeAwareHandler dials (TCP and TLS) before it writes
			// the request, and names dial errors with this prefix.
			reached = tw.err == nil || !strings.HasPrefix(tw.err.Error(), upgradeDialErrorPrefix)
		} else {
			a := &attempt{}
			p.reverseProxy(peer.Endpoint, longRunning).ServeHTTP(tw, r.WithContext(httptrace.WithClientTrace(ctx, a.trace())))
			reached = a.wroteHeaders.Load()
		}
		if tw.err == nil {
			audit.AddAuditAnnotation(ctx, AuditProxiedTo, peer.ID)
			annotateFailedOver(ctx, tried)
			proxied(ctx, res.GVR, tw.status(), time.Since(start))
			return
		}
		if ctx.Err() != nil {
			// The client left or the request deadline passed: the outer
			// filters answer; nothing to retry.
			ownAnswer(w, chainCacheControl)
			proxyError(ctx, "canceled", res.GVR)
			klog.V(2).InfoS("peerdiscovery filter: request ended while proxying", "peer", peer.ID, "gvr", res.GVR.String(), "err", tw.err)
			return
		}
		if !reached && !body.used() && !tw.wrote {
			proxyError(ctx, "connect", res.GVR)
			klog.V(2).InfoS("peerdiscovery filter: peer could not be reached, trying the next", "peer", peer.ID, "gvr", res.GVR.String(), "err", tw.err)
			tried = append(tried, peer.ID)
			continue
		}
		proxyError(ctx, "proxy", res.GVR)
		klog.ErrorS(tw.err, "peerdiscovery filter: proxying failed after the peer may have received the request", "peer", peer.ID, "gvr", res.GVR.String(), "method", r.Method)
		if !upgrade && safeRead(r) && !tw.wrote {
			tried = append(tried, peer.ID)
			continue
		}
		audit.AddAuditAnnotation(ctx, AuditProxiedTo, peer.ID)
		annotateFailedOver(ctx, tried)
		if tw.wrote {
			// The response had started: nothing more can be said.
			return
		}
		ownAnswer(w, chainCacheControl)
		sentButFailed(w, r, s, res.GVR, peer.ID, tw.err, retryAfter)
		return
	}
	ownAnswer(w, chainCacheControl)
	annotateFailedOver(ctx, tried)
	audit.AddAuditAnnotation(ctx, AuditError, "no peer could take the request")
	unavailable(w, r, s, res.GVR, "no peer serving it could be reached (tried "+strings.Join(tried, ", ")+")", retryAfter)
}

// ownAnswer puts back the chain's Cache-Control for an answer this server
// writes itself.
func ownAnswer(w http.ResponseWriter, chainCacheControl []string) {
	if len(chainCacheControl) > 0 && len(w.Header().Values("Cache-Control")) == 0 {
		w.Header()["Cache-Control"] = chainCacheControl
	}
}

func annotateFailedOver(ctx context.Context, ids []string) {
	if len(ids) > 0 {
		audit.AddAuditAnnotation(ctx, AuditFailedOver, strings.Join(ids, ","))
	}
}

// attempt records from the transport's own trace how far one try at a peer
// got. Until the request headers are written the peer cannot have acted
// on the request; after, it may have.
type attempt struct {
	wroteHeaders atomic.Bool
}

func (a *attempt) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{WroteHeaders: func() { a.wroteHeaders.Store(true) }}
}

// serveUpgrade proxies an upgrade (exec, attach, port-forward, websocket)
// with UpgradeAwareHandler, which dials the peer and splices the hijacked
// connections. The identity is set on the request it writes to the peer as
// is (no hop-by-hop stripping after it): the upgrade dial does not go
// through a round tripper (upstream loses the identity there).
func (p *proxier) serveUpgrade(tw *trackingWriter, r *http.Request, endpoint string, u user.Info) {
	location := &url.URL{Scheme: "https", Host: endpoint, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	out := r.Clone(r.Context())
	out.URL = location
	out.Host = location.Host
	out.RequestURI = ""
	setPeerHeaders(out, u)
	h := proxy.NewUpgradeAwareHandler(location, p.transports.Load().long, false, false, errorRecorder{tw})
	h.UseLocationHost = true
	h.RejectForwardingRedirects = true
	// The wrapper keeps the writer's Flusher, CloseNotifier and (on HTTP/1)
	// Hijacker, which upgrades need.
	h.ServeHTTP(responsewriter.WrapForHTTP1Or2(tw), out)
}

// setPeerHeaders makes the headers of a request to a peer: whatever the
// client sent, the peer sees exactly the authenticated user of this server
// (set for the front-proxy client certificate), the loop header and this
// request's Audit-ID. It must run after hop-by-hop stripping (a client's
// Connection header could name any of them).
func setPeerHeaders(out *http.Request, u user.Info) {
	h := out.Header
	for k := range h {
		// Identity a client claims for itself: X-Remote-* (any case) and
		// impersonation, which this server has already applied.
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-remote-") || strings.HasPrefix(lk, "impersonate-") {
			delete(h, k)
		}
	}
	for _, k := range clientOnlyHeaders {
		h.Del(k)
	}
	if u == nil {
		u = &user.DefaultInfo{}
	}
	transport.SetAuthProxyHeaders(out, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
	h.Set(PeerProxiedHeader, "true")
	if id, ok := audit.AuditIDFrom(out.Context()); ok && id != "" {
		h.Set(auditinternal.HeaderAuditID, string(id))
	}
}

// clientOnlyHeaders are removed from every request to a peer.
var clientOnlyHeaders = []string{
	// The client's credentials: the peer trusts this server's certificate.
	"Authorization",
	"Proxy-Authorization",
	// Go's transport replays a request carrying these after a connection
	// failure, even when the peer may have processed it.
	"Idempotency-Key",
	"X-Idempotency-Key",
	// Set again from this server's audit context.
	auditinternal.HeaderAuditID,
}

// maxCachedProxies bounds the reverse proxy cache: endpoints change when
// servers move, and a cache rebuilt from scratch costs one allocation each.
const maxCachedProxies = 256

type proxyKey struct {
	endpoint    string
	longRunning bool
}

// reverseProxy returns the reverse proxy to one peer endpoint. Its Rewrite
// runs after httputil.ReverseProxy has removed the hop-by-hop headers
// (those the client's Connection header names included), so the identity,
// loop and Audit-ID headers it sets reach the peer whatever the client
// sent. Errors are recorded in the trackingWriter, so that serve can decide
// whether to try the next peer; redirects are refused as
// UpgradeAwareHandler's RejectForwardingRedirects does; the transport is
// read per request, so a CA reload takes effect at once.
func (p *proxier) reverseProxy(endpoint string, longRunning bool) *httputil.ReverseProxy {
	key := proxyKey{endpoint, longRunning}
	if rp, ok := p.proxies.Load(key); ok {
		return rp.(*httputil.ReverseProxy)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", endpoint
			pr.Out.Host = endpoint
			// Keep the client's X-Forwarded-For chain and append the
			// client's address, as a Director-based proxy does.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			u, _ := apirequest.UserFrom(pr.In.Context())
			setPeerHeaders(pr.Out, u)
		},
		Transport:      currentTransport{p: p, longRunning: longRunning},
		BufferPool:     &copyBuffers,
		ModifyResponse: modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if tw, ok := w.(*trackingWriter); ok {
				tw.err = err
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	if p.proxiesCount.Add(1) > maxCachedProxies {
		p.proxies.Clear()
		p.proxiesCount.Store(1)
	}
	actual, _ := p.proxies.LoadOrStore(key, rp)
	return actual.(*httputil.ReverseProxy)
}

// endOnShutdown ends a proxied watch's stream when this server stops
// accepting requests, as kube-apiserver ends its own watches: the chain's
// WithWatchTerminationDuringShutdown (--shutdown-watch-termination-grace-period
// > 0) puts that signal in a watch's context. Without it, a watch proxied
// through a stopping server held its HTTP server open until the shutdown
// timeout, and the graceful stop took a minute. The stream ends cleanly
// (EOF, not a cut connection), so the client just watches again.
func endOnShutdown(resp *http.Response) {
	if resp.Request == nil || resp.Body == nil {
		return
	}
	sig := apirequest.ServerShutdownSignalFrom(resp.Request.Context())
	if sig == nil {
		return
	}
	b := &shutdownBody{ReadCloser: resp.Body, done: make(chan struct{})}
	go func() {
		select {
		case <-sig.ShuttingDown():
			b.shutdown.Store(true)
			_ = b.ReadCloser.Close() // unblocks a pending Read
		case <-b.done:
		}
	}()
	resp.Body = b
}

type shutdownBody struct {
	io.ReadCloser
	done      chan struct{}
	closeOnce sync.Once
	shutdown  atomic.Bool
}

func (b *shutdownBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.shutdown.Load() {
		return n, io.EOF
	}
	return n, err
}

func (b *shutdownBody) Close() error {
	b.closeOnce.Do(func() { close(b.done) })
	return b.ReadCloser.Close()
}

// currentTransport round-trips with the proxier's current transport.
type currentTransport struct {
	p           *proxier
	longRunning bool
}

func (t currentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.p.transports.Load().pick(t.longRunning).RoundTrip(r)
}

// modifyResponse refuses redirects and drops the peer's copies of headers
// this server has set on the response already.
func modifyResponse(resp *http.Response) error {
	// The peer's Audit-ID is this request's (forwarded); the priority and
	// fairness headers name the peer's flow schema, not the one that
	// admitted the client here.
	resp.Header.Del(auditinternal.HeaderAuditID)
	resp.Header.Del(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)
	resp.Header.Del(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)
	if err := rejectRedirect(resp); err != nil {
		return err
	}
	endOnShutdown(resp)
	return nil
}

// rejectRedirect replaces a peer's redirect with a 502, as
// UpgradeAwareHandler.RejectForwardingRedirects does: a redirect would send
// the client, or its credentials, elsewhere. The one exception keeps the
// client on this server: an OpenAPI v3 document's redirect from a stale
// hash to the current one, a path under /openapi/v3/ with no host.
func rejectRedirect(resp *http.Response) error {
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.Header.Get("Location") != "" {
		if sameServerOpenAPIRedirect(resp) {
			return nil
		}
		_ = resp.Body.Close()
		const msg = "the backend attempted to redirect this request, which is not permitted"
		*resp = http.Response{
			StatusCode:    http.StatusBadGateway,
			Status:        fmt.Sprintf("%d %s", http.StatusBadGateway, http.StatusText(http.StatusBadGateway)),
			Body:          io.NopCloser(strings.NewReader(msg)),
			ContentLength: int64(len(msg)),
			Request:       resp.Request,
		}
	}
	return nil
}

// sameServerOpenAPIRedirect is true for a redirect of an OpenAPI v3
// request to a path of this server's OpenAPI v3 (no scheme, no host).
func sameServerOpenAPIRedirect(resp *http.Response) bool {
	if resp.Request == nil || resp.Request.URL == nil || !strings.HasPrefix(resp.Request.URL.Path, openAPIPrefix) {
		return false
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	return err == nil && loc.Scheme == "" && loc.Host == "" && loc.User == nil &&
		strings.HasPrefix(loc.Path, openAPIPrefix) && !strings.HasPrefix(resp.Header.Get("Location"), "//")
}

// copyBufferSize is httputil's default copy buffer size.
const copyBufferSize = 32 << 10

// copyBuffers pools the reverse proxies' copy buffers.
var copyBuffers bufferPool

type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[copyBufferSize]byte); ok {
		return buf[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (b *bufferPool) Put(buf []byte) {
	if len(buf) == copyBufferSize {
		b.pool.Put((*[copyBufferSize]byte)(buf))
	}
}

// upgradeDialErrorPrefix starts UpgradeAwareHandler's errors for a backend
// it could not connect to.
const upgradeDialErrorPrefix = "error dialing backend: "

// errorRecorder records UpgradeAwareHandler's error instead of writing it,
// so the caller can try another peer.
type errorRecorder struct{ tw *trackingWriter }

func (e errorRecorder) Error(_ http.ResponseWriter, _ *http.Request, err error) { e.tw.err = err }

// safeRead is true for reads: repeating them on another peer changes
// nothing (upgrades are excluded by the caller).
func safeRead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// replayableBody lets a request body be handed to a second peer when the
// first could not be connected to: it records whether a byte was read and
// ignores the transport's Close (the server closes the real body).
type replayableBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *replayableBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.read.Store(true)
	}
	return n, err
}

func (b *replayableBody) Close() error { return nil }
func (b *replayableBody) used() bool   { return b.read.Load() }

// trackingWriter records the status, whether anything was written and the
// proxy's error, if any.
type trackingWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
	err   error
}

func (t *trackingWriter) WriteHeader(code int) {
	t.code, t.wrote = code, true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if !t.wrote {
		t.code, t.wrote = http.StatusOK, true
	}
	return t.ResponseWriter.Write(b)
}

// Unwrap makes trackingWriter a responsewriter.UserProvidedDecorator.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *trackingWriter) status() int {
	if t.code == 0 {
		return http.StatusOK
	}
	return t.code
}

// unavailable answers 503 with a Status body and Retry-After: peers serve
// the resource but none can take the request now, and none has seen it.
// Not a 404: the resource exists in the cluster.
func unavailable(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, msg string, retryAfter int) {
	proxyError(r.Context(), "unavailable", gvr)
	retryLater(w, r, s, gvr, fmt.Sprintf("%s is served by peer kube-apiservers that are unavailable: %s", gvr.GroupResource().String(), msg), retryAfter)
}

// retryLater answers 503 with message, a Status body and Retry-After.
func retryLater(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, message string, retryAfter int) {
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: message,
		Details: &metav1.StatusDetails{Group: gvr.Group, Kind: gvr.Resource, RetryAfterSeconds: int32(retryAfter)},
	}}
	// ErrorNegotiated sets Retry-After from RetryAfterSeconds.
	responsewriters.ErrorNegotiated(status, s, gvr.GroupVersion(), w, r)
}

// sentButFailed answers a request that was sent to a peer which then failed
// to answer: 504 when it timed out, else 502. A read gets Retry-After (a
// client retry is safe); a write does not, so that no client replays a
// request the peer may have carried out. The message names the resource,
// the decision and the peer; the network error itself goes to the log.
func sentButFailed(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, peerID string, err error, retryAfter int) {
	code, reason, what := http.StatusBadGateway, metav1.StatusReasonInternalError, "lost the connection before answering"
	if isTimeout(err) {
		code, reason, what = http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "did not answer in time"
	}
	msg := fmt.Sprintf("%s is served by peer kube-apiserver %s: the request was proxied to it, and it %s", gvr.GroupResource().String(), peerID, what)
	var delay int32
	if safeRead(r) {
		delay = int32(retryAfter)
	} else {
		msg += "; it was not retried because the peer may have carried it out: check before repeating it"
	}
	audit.AddAuditAnnotation(r.Context(), AuditError, what)
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(code),
		Reason:  reason,
		Message: msg,
		Details: &metav1.StatusDetails{Group: gvr.Group, Kind: gvr.Resource, RetryAfterSeconds: delay},
	}}
	responsewriters.ErrorNegotiated(status, s, gvr.GroupVersion(), w, r)
}

// isTimeout is true for a response header timeout, a dial or TLS timeout
// and a deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
