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
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"
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
	return p, nil
}

type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }

// run starts the file watchers. A CA file that does not hold a valid
// certificate is refused by DynamicFileCAContent itself (its loadCABundle
// keeps the last good bundle and calls no listener), so the transports
// keep trusting the last good CA.
func (p *proxier) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	p.ca.AddListener(listenerFunc(func() {
		if err := p.rebuildTransport(); err != nil {
			logger.Error(err, "peerdiscovery filter: reloading --peer-ca-file failed; keeping the previous CA")
		}
	}))
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

// currentTransport round-trips with the proxier's current transport.
type currentTransport struct {
	p           *proxier
	longRunning bool
}

func (t currentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.p.transports.Load().pick(t.longRunning).RoundTrip(r)
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
