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

package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/egressselector"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/filter/status"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Proxier sends requests to peers over pooled transports: the peer CA
// verifies their serving certificates, the front-proxy client certificate
// proves that the X-Remote-* identity headers come from a kube-apiserver.
// Both files are reloaded when they change.
type Proxier struct {
	ca         *dynamiccertificates.DynamicFileCAContent
	clientCert *dynamiccertificates.DynamicCertKeyPairContent
	serverName string
	// headerTimeout bounds the wait for a peer's response headers on
	// requests that are not long-running.
	headerTimeout time.Duration
	http2         HTTP2

	mu       sync.Mutex
	keyPair  *tls.Certificate
	keyBytes []byte

	transports atomic.Pointer[peerTransports]
	// egressDial makes the TCP connections to peers when kube-apiserver
	// has an egress selector with a controlplane network context (nil:
	// they are dialled directly); set by UseEgressSelector.
	egressDial atomic.Pointer[utilnet.DialFunc]

	// Answers writes the filter's own Status answers (set once, before
	// the first request); clock times the proxied requests.
	Answers status.Answers
	clock   clock.WithTickerAndDelayedExecution

	// inflight lets the view end the requests in flight to a peer that
	// stopped answering (StopPeer).
	inflight inflight
	// unreachable fails at once the dials to a peer endpoint whose last
	// dial was pending over suspectAfter or timed out, until a probe
	// connects to it again.
	unreachable unreachable
	// snapshot is where the filter's current routing snapshot is
	// published (nil: every candidate is tried, none is gone): read before
	// each attempt, so a candidate that stopped since the decision is
	// skipped, and when none could be reached.
	snapshot *atomic.Pointer[routing.Snapshot]

	// proxies holds one reverse proxy per peer endpoint and way of
	// handling the answer (proxyKey: a handful per kube-apiserver), built
	// once. Building one per request, as UpgradeAwareHandler does, costs
	// allocations and a 32 KiB copy buffer on every proxied request.
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

// Config is what a Proxier is built from (the filter's Options).
type Config struct {
	CAFile, ClientCertFile, ClientKeyFile string
	// ServerName is verified in peers' certificates.
	ServerName string
	// HeaderTimeout bounds the wait for a peer's response headers on
	// requests that are not long-running.
	HeaderTimeout time.Duration
	HTTP2         HTTP2
	// Snapshot is where the filter's current routing snapshot is
	// published (nil: every candidate is tried); Clock is the filter's
	// (nil: the real one).
	Snapshot *atomic.Pointer[routing.Snapshot]
	Clock    clock.WithTickerAndDelayedExecution
}

// HTTP2 is how connections to peers use HTTP/2.
type HTTP2 struct {
	// Disabled makes them HTTP/1.1.
	Disabled bool
	// ReadIdleTimeout and PingTimeout are the connection health check: a
	// ping after ReadIdleTimeout without a frame, the connection closed
	// PingTimeout later without an answer. A ReadIdleTimeout of 0 turns
	// the check off.
	ReadIdleTimeout, PingTimeout time.Duration
}

// New builds a Proxier; Run starts its certificate reloaders.
func New(c Config) (*Proxier, error) {
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("--peer-ca-file: %w", err)
	}
	cert, err := dynamiccertificates.NewDynamicServingContentFromFiles("proxy-client", c.ClientCertFile, c.ClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err)
	}
	p := &Proxier{ca: ca, clientCert: cert, serverName: c.ServerName, headerTimeout: c.HeaderTimeout, http2: c.HTTP2, snapshot: c.Snapshot, clock: c.Clock}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if err := p.rebuildTransport(); err != nil {
		return nil, err
	}
	return p, nil
}

type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }

// Run starts the file watchers. A CA file that does not hold a valid
// certificate is refused by DynamicFileCAContent itself (its loadCABundle
// keeps the last good bundle and calls no listener), so the transports
// keep trusting the last good CA.
func (p *Proxier) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.ca.AddListener(listenerFunc(func() {
		if err := p.rebuildTransport(); err != nil {
			logger.Error(err, "peerdiscovery filter: reloading --peer-ca-file failed; keeping the previous CA")
		}
	}))
	p.unreachable.mu.Lock()
	p.unreachable.ctx = ctx
	p.unreachable.mu.Unlock()
	go p.ca.Run(ctx, 1)
	go p.clientCert.Run(ctx, 1)
}

// rebuildTransport makes new pooled transports for the current CA;
// in-flight requests finish on the old ones.
func (p *Proxier) rebuildTransport() error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.ca.CurrentCABundleContent()) {
		return fmt.Errorf("--peer-ca-file: no certificates found")
	}
	t := &peerTransports{short: p.newTransport(pool, p.headerTimeout), long: p.newTransport(pool, 0)}
	if old := p.transports.Swap(t); old != nil {
		// Idle connections verified against the old CA are dropped; busy
		// ones finish their request.
		p.clock.AfterFunc(time.Minute, func() {
			old.short.CloseIdleConnections()
			old.long.CloseIdleConnections()
		})
	}
	return nil
}

// PeerDialTimeout bounds the making of a connection to a peer (TCP, or
// the egress selector's dial), so that a candidate that cannot be reached
// gives way to the next one.
const PeerDialTimeout = 5 * time.Second

// UseEgressSelector makes every connection to a peer go through the
// egress selector's controlplane network context when kube-apiserver has
// one (--egress-selector-config-file; an HTTP CONNECT or konnectivity
// proxy), as upstream's peer proxy does (BuildPeerProxy in
// k8s.io/kubernetes/pkg/controlplane/apiserver). Without an egress
// selector, or without that context in it, peers are dialled directly.
// Only the TCP connection changes: TLS to the peer (--peer-ca-file, the
// server name, the front-proxy client certificate) is the transports' own
// either way.
func (p *Proxier) UseEgressSelector(es *egressselector.EgressSelector) {
	if es == nil {
		p.egressDial.Store(nil)
		return
	}
	dial, err := es.Lookup(egressselector.ControlPlane.AsNetworkContext())
	if err != nil {
		// Lookup returns no error in the releases this builds against;
		// should it, peers are not dialled directly against the
		// configuration.
		klog.Background().Error(err, "peerdiscovery filter: the egress selector has no dialer for the controlplane network context; peers cannot be reached")
		dial = func(context.Context, string, string) (net.Conn, error) {
			return nil, fmt.Errorf("egress selector, controlplane network context: %w", err)
		}
	}
	if dial == nil {
		p.egressDial.Store(nil)
		return
	}
	klog.Background().Info("peerdiscovery filter: connecting to peers through the egress selector's controlplane network context")
	p.egressDial.Store(&dial)
}

// dialPeer makes the TCP connection of a transport to a peer, for the
// requests it round-trips and the upgrades UpgradeAwareHandler dials
// (proxy.DialURL takes the transport's DialContext).
// A dial still pending after suspectAfter, or that timed out, marks the
// endpoint unreachable: the dials after it fail at once until a probe
// connects again (unreachable).
func (p *Proxier) dialPeer(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.unreachable.marked(addr) {
		return nil, unreachableError(network, addr)
	}
	// Only a direct dial is suspected early and probed within a second: a
	// SYN is answered in milliseconds, while an egress proxy's CONNECT (or
	// konnectivity dial) may take seconds on a path that works.
	direct := p.egressDial.Load() == nil
	probeBound := PeerDialTimeout
	if direct {
		probeBound = probeTimeout
	}
	mark := func() {
		p.unreachable.mark(addr, p.clock, func(ctx context.Context) error {
			conn, err := p.dial(ctx, network, addr, probeBound)
			if err == nil {
				_ = conn.Close()
			}
			return err
		})
	}
	if direct {
		suspect := p.clock.AfterFunc(suspectAfter, mark)
		defer suspect.Stop()
	}
	conn, err := p.dial(ctx, network, addr, PeerDialTimeout)
	if dialTimedOut(ctx, err) {
		mark()
	}
	return conn, err
}

// dial makes one TCP connection to a peer, directly or through the egress
// selector, within timeout.
func (p *Proxier) dial(ctx context.Context, network, addr string, timeout time.Duration) (net.Conn, error) {
	dial := p.egressDial.Load()
	if dial == nil {
		d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
		return d.DialContext(ctx, network, addr)
	}
	return dialWithin(ctx, timeout, *dial, network, addr)
}

// dialWithin calls dial bounded by timeout and ctx, even where dial does
// not honour them: the egress selector's HTTP CONNECT dialer waits for the
// proxy's answer to CONNECT without a deadline, so a proxy that hangs
// would hold a request (an upgrade: for ever) instead of letting it go on
// to the next candidate. A connection made after the bound is closed. The
// context given to dial ends when dialWithin returns: it bounds the dial
// only (an established tunnel outlives it, as the egress selector's
// dialers promise).
func dialWithin(ctx context.Context, timeout time.Duration, dial utilnet.DialFunc, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		conn, err := dial(ctx, network, addr)
		done <- dialed{conn, err}
	}()
	select {
	case d := <-done:
		return d.conn, d.err
	case <-ctx.Done():
		go func() {
			if d := <-done; d.conn != nil {
				_ = d.conn.Close()
			}
		}()
		return nil, fmt.Errorf("dial %s %s through the egress selector: %w", network, addr, ctx.Err())
	}
}

// newTransport is one pool of connections to peers, with apimachinery's
// defaults (SetOldTransportDefaults) and HTTP/2 with a connection health
// check configured as SetTransportDefaults does, but shorter (see
// Config.HTTP2). Connections are made by dialPeer.
func (p *Proxier) newTransport(pool *x509.CertPool, headerTimeout time.Duration) *http.Transport {
	t := utilnet.SetOldTransportDefaults(&http.Transport{
		DialContext: p.dialPeer,
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
		// The client's Accept-Encoding goes to the peer as it is, and
		// the peer's answer comes back as it is. Without this, a request
		// without one (a client with compression off, such as
		// rest.Config.DisableCompression) went out with gzip: the peer
		// compressed a large LIST and this server inflated it again, CPU
		// on both for nothing (test/bench's profiles).
		DisableCompression:    true,
		MaxIdleConns:          200,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	})
	// Peers are never reached through an HTTP proxy from the environment
	// (SetOldTransportDefaults adds one); only through the egress
	// selector (dialPeer).
	t.Proxy = nil
	if p.http2.Disabled {
		t.TLSClientConfig.NextProtos = []string{"http/1.1"}
		return t
	}
	t2, err := http2.ConfigureTransports(t)
	if err != nil {
		// Only for a transport already configured for HTTP/2: never here.
		klog.Background().Error(err, "peerdiscovery filter: configuring HTTP/2 to peers failed; using HTTP/1.1")
		return t
	}
	t2.ReadIdleTimeout = p.http2.ReadIdleTimeout
	t2.PingTimeout = p.http2.PingTimeout
	return t
}

func (p *Proxier) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
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

// currentTransport round-trips with the Proxier's current transport.
type currentTransport struct {
	p           *Proxier
	longRunning bool
}

func (t currentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ts := t.p.transports.Load()
	if t.longRunning {
		return ts.long.RoundTrip(r)
	}
	return ts.short.RoundTrip(r)
}

// attempt records from the transport's own trace how far one try at a peer
// got. Until the request headers are written the peer cannot have acted
// on the request; after, it may have.
type attempt struct {
	wroteHeaders atomic.Bool
}

// wroteRequest is the attempt's httptrace.ClientTrace.WroteHeaders: a
// method here, beside the transport that calls it, rather than a closure
// made in Serve, so that following an attempt enters each file at most
// twice.
func (a *attempt) wroteRequest() { a.wroteHeaders.Store(true) }
