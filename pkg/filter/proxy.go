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
	"k8s.io/apimachinery/pkg/util/proxy"
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
func (p *proxier) serve(w http.ResponseWriter, r *http.Request, res routing.Result, s runtime.NegotiatedSerializer, retryAfter int, local http.Handler) {
	user, ok := apirequest.UserFrom(r.Context())
	if !ok {
		responsewriters.InternalError(w, r, errors.New("no user in the request context"))
		return
	}
	start := time.Now()
	body := &replayableBody{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	var lastErr error
	for i, peer := range res.Candidates {
		location := &url.URL{Scheme: "https", Host: peer.Endpoint, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
		out := r.Clone(r.Context())
		out.URL = location
		out.Host = location.Host
		out.RequestURI = ""
		// Identity comes only from the authenticated user: any X-Remote-*
		// header a client sent is removed and the headers are set again.
		// Setting them on the request (not in a round tripper) makes them
		// reach the peer on upgrades (exec, attach, port-forward) too.
		transport.SetAuthProxyHeaders(out, user.GetName(), user.GetUID(), user.GetGroups(), user.GetExtra())
		out.Header.Set(PeerProxiedHeader, "true")

		rec := &connectErrorResponder{}
		tw := &trackingWriter{ResponseWriter: w}
		h := proxy.NewUpgradeAwareHandler(location, p.transport.Load(), false, false, rec)
		h.UseLocationHost = true
		h.RejectForwardingRedirects = true
		// The wrapper keeps the writer's Flusher, CloseNotifier and (on
		// HTTP/1) Hijacker, which upgrades need.
		h.ServeHTTP(responsewriter.WrapForHTTP1Or2(tw), out)
		if rec.err == nil {
			proxied(r.Context(), res.GVR, tw.status(), time.Since(start))
			return
		}
		lastErr = rec.err
		// Retry when the request never reached the peer, or when it is a
		// safe read whose response has not started (a peer killed mid-GET).
		if tw.wrote || body.used() || !(retryable(rec.err) || safeToRepeat(r)) {
			// The peer may have seen the request: never replay it.
			proxyError(r.Context(), "proxy", res.GVR)
			klog.ErrorS(rec.err, "peerdiscovery filter: proxying failed", "peer", peer.ID, "gvr", res.GVR.String())
			unavailable(w, r, s, res.GVR, fmt.Sprintf("peer %s failed: %v", peer.ID, rec.err), retryAfter)
			return
		}
		proxyError(r.Context(), "connect", res.GVR)
		klog.V(2).InfoS("peerdiscovery filter: peer unreachable, trying the next", "peer", peer.ID, "attempt", i+1, "err", rec.err)
	}
	unavailable(w, r, s, res.GVR, fmt.Sprintf("no peer serving it could be reached: %v", lastErr), retryAfter)
}

// upgradeDialErrorPrefix starts UpgradeAwareHandler's errors for a backend
// it could not connect to.
const upgradeDialErrorPrefix = "error dialing backend: "

// connectErrorResponder records the error instead of writing it, so the
// caller can try another peer.
type connectErrorResponder struct{ err error }

func (c *connectErrorResponder) Error(_ http.ResponseWriter, _ *http.Request, err error) { c.err = err }

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

// safeToRepeat is true for reads that are not upgrades: repeating them on
// another peer changes nothing.
func safeToRepeat(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Upgrade") == ""
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

// trackingWriter records the status and whether anything was written.
type trackingWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
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
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("%s is served by peer kube-apiservers that are unavailable: %s", gvr.GroupResource().String(), msg),
		Details: &metav1.StatusDetails{Group: gvr.Group, Kind: gvr.Resource, RetryAfterSeconds: int32(retryAfter)},
	}}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	proxyError(r.Context(), "unavailable", gvr)
	responsewriters.ErrorNegotiated(status, s, gvr.GroupVersion(), w, r)
}
