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
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// proxier sends requests to peers over one pooled transport: the peer CA
// verifies their serving certificates, the front-proxy client certificate
// proves that the X-Remote-* identity headers come from a kube-apiserver.
// Both files are reloaded when they change.
type proxier struct {
	ca         *dynamiccertificates.DynamicFileCAContent
	clientCert *dynamiccertificates.DynamicCertKeyPairContent
	serverName string

	mu       sync.Mutex
	keyPair  *tls.Certificate
	keyBytes []byte

	transport atomic.Pointer[http.Transport]

	// proxies holds one reverse proxy per peer endpoint (a handful: one
	// per kube-apiserver), built once. Building one per request, as
	// UpgradeAwareHandler does, costs allocations and a 32 KiB copy buffer
	// on every proxied request.
	proxies      sync.Map // endpoint -> *httputil.ReverseProxy
	proxiesCount atomic.Int32
}

func newProxier(caFile, certFile, keyFile, serverName string) (*proxier, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", caFile)
	if err != nil {
		return nil, fmt.Errorf("--peer-ca-file: %w", err)
	}
	cert, err := dynamiccertificates.NewDynamicServingContentFromFiles("proxy-client", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err)
	}
	p := &proxier{ca: ca, clientCert: cert, serverName: serverName}
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

// rebuildTransport makes a new pooled transport for the current CA; in-flight
// requests finish on the old one.
func (p *proxier) rebuildTransport() error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.ca.CurrentCABundleContent()) {
		return fmt.Errorf("--peer-ca-file: no certificates found")
	}
	t := &http.Transport{
		Proxy: nil, // peers are reached directly, never through an HTTP proxy
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
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConns:          200,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if old := p.transport.Swap(t); old != nil {
		// Idle connections verified against the old CA are dropped; busy
		// ones finish their request.
		time.AfterFunc(time.Minute, old.CloseIdleConnections)
	}
	return nil
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

// serve proxies r to the first candidate it can connect to. A candidate
// that cannot be connected to never saw the request, so the next one is
// tried, writes included. When none can be reached the answer is 503.
func (p *proxier) serve(w http.ResponseWriter, r *http.Request, res routing.Result, s runtime.NegotiatedSerializer, retryAfter int) {
	u, ok := apirequest.UserFrom(r.Context())
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
	var lastErr error
	for i, peer := range res.Candidates {
		tw := &trackingWriter{ResponseWriter: w}
		if upgrade {
			p.serveUpgrade(tw, r, peer.Endpoint, u)
		} else {
			// The reverse proxy sets the identity on its copy of the
			// request (see reverseProxy).
			p.reverseProxy(peer.Endpoint).ServeHTTP(tw, r)
		}
		if tw.err == nil {
			proxied(r.Context(), res.GVR, tw.status(), time.Since(start))
			return
		}
		lastErr = tw.err
		// Retry when the request never reached the peer, or when it is a
		// safe read whose response has not started (a peer killed mid-GET).
		if tw.wrote || body.used() || !(retryable(tw.err) || (!upgrade && safeRead(r))) {
			// The peer may have seen the request: never replay it.
			proxyError(r.Context(), "proxy", res.GVR)
			klog.ErrorS(tw.err, "peerdiscovery filter: proxying failed", "peer", peer.ID, "gvr", res.GVR.String())
			unavailable(w, r, s, res.GVR, fmt.Sprintf("peer %s failed: %v", peer.ID, tw.err), retryAfter)
			return
		}
		proxyError(r.Context(), "connect", res.GVR)
		klog.V(2).InfoS("peerdiscovery filter: peer unreachable, trying the next", "peer", peer.ID, "attempt", i+1, "err", tw.err)
	}
	unavailable(w, r, s, res.GVR, fmt.Sprintf("no peer serving it could be reached: %v", lastErr), retryAfter)
}

// serveUpgrade proxies an upgrade (exec, attach, port-forward, websocket)
// with UpgradeAwareHandler, which dials the peer and splices the hijacked
// connections. The identity is set on the request itself: the upgrade dial
// does not go through a round tripper (upstream loses it there).
func (p *proxier) serveUpgrade(tw *trackingWriter, r *http.Request, endpoint string, u user.Info) {
	location := &url.URL{Scheme: "https", Host: endpoint, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	out := r.Clone(r.Context())
	out.URL = location
	out.Host = location.Host
	out.RequestURI = ""
	setIdentity(out, u)
	h := proxy.NewUpgradeAwareHandler(location, p.transport.Load(), false, false, errorRecorder{tw})
	h.UseLocationHost = true
	h.RejectForwardingRedirects = true
	// The wrapper keeps the writer's Flusher, CloseNotifier and (on HTTP/1)
	// Hijacker, which upgrades need.
	h.ServeHTTP(responsewriter.WrapForHTTP1Or2(tw), out)
}

// setIdentity sets the proxied request's identity from the authenticated
// user only: any X-Remote-* header a client sent is removed and the headers
// are set again; the loop header stops the peer from proxying it further.
func setIdentity(out *http.Request, u user.Info) {
	if u == nil {
		u = &user.DefaultInfo{}
	}
	transport.SetAuthProxyHeaders(out, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
	out.Header.Set(PeerProxiedHeader, "true")
}

// maxCachedProxies bounds the reverse proxy cache: endpoints change when
// servers move, and a cache rebuilt from scratch costs one allocation each.
const maxCachedProxies = 256

// reverseProxy returns the reverse proxy to one peer endpoint. Its Director
// points the request (the proxy's own copy) at the peer and sets the
// identity; errors are recorded in the trackingWriter, so that serve can
// try the next peer; redirects are refused as UpgradeAwareHandler's
// RejectForwardingRedirects does; the transport is read per request, so a
// CA reload takes effect at once.
func (p *proxier) reverseProxy(endpoint string) *httputil.ReverseProxy {
	if rp, ok := p.proxies.Load(endpoint); ok {
		return rp.(*httputil.ReverseProxy)
	}
	rp := &httputil.ReverseProxy{
		Director: func(out *http.Request) {
			out.URL.Scheme, out.URL.Host = "https", endpoint
			out.Host = endpoint
			u, _ := apirequest.UserFrom(out.Context())
			setIdentity(out, u)
		},
		Transport:      currentTransport{p},
		BufferPool:     &copyBuffers,
		ModifyResponse: rejectRedirect,
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
	actual, _ := p.proxies.LoadOrStore(endpoint, rp)
	return actual.(*httputil.ReverseProxy)
}

// currentTransport round-trips with the proxier's current transport.
type currentTransport struct{ p *proxier }

func (t currentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.p.transport.Load().RoundTrip(r)
}

// rejectRedirect replaces a peer's redirect with a 502, as
// UpgradeAwareHandler.RejectForwardingRedirects does: a redirect would send
// the client, or its credentials, elsewhere.
func rejectRedirect(resp *http.Response) error {
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.Header.Get("Location") != "" {
		_ = resp.Body.Close()
		const msg = "the backend attempted to redirect this request, which is not permitted"
		*resp = http.Response{
			StatusCode:    http.StatusBadGateway,
			Status:        fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode)),
			Body:          io.NopCloser(strings.NewReader(msg)),
			ContentLength: int64(len(msg)),
			Request:       resp.Request,
		}
	}
	return nil
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

// retryable is true when the connection could not be made: the request was
// never sent.
func retryable(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	// Upgrades (exec, attach, port-forward) dial in UpgradeAwareHandler,
	// which flattens the dial and TLS handshake errors with %v under this
	// prefix (k8s.io/apimachinery/pkg/util/proxy, v0.36 and v0.37): nothing
	// was written to the peer yet.
	if strings.HasPrefix(err.Error(), upgradeDialErrorPrefix) {
		return true
	}
	var verifyErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	return errors.As(err, &verifyErr) || errors.As(err, &recordErr)
}

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
// the resource but none can take the request now. Not a 404: the resource
// exists in the cluster.
func unavailable(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, msg string, retryAfter int) {
	retryLater(w, r, s, gvr, "unavailable", fmt.Sprintf("%s is served by peer kube-apiservers that are unavailable: %s", gvr.GroupResource().String(), msg), retryAfter)
}

// retryLater answers 503 with message, a Status body and Retry-After, and
// counts it as a proxy error of errType.
func retryLater(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, errType, message string, retryAfter int) {
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: message,
		Details: &metav1.StatusDetails{Group: gvr.Group, Kind: gvr.Resource, RetryAfterSeconds: int32(retryAfter)},
	}}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	proxyError(r.Context(), errType, gvr)
	responsewriters.ErrorNegotiated(status, s, gvr.GroupVersion(), w, r)
}
