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

package egress

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connectProxy is an HTTP CONNECT proxy over TLS, as an egress selector's
// HTTPConnect connection over TCP speaks to it: it requires a client
// certificate from its CA, opens tunnels only to the addresses it is
// given (the plane's kube-apiservers; anything else is 403), and counts
// the tunnels and their bytes by client and target.
type connectProxy struct {
	srv     *http.Server
	allowed map[string]bool

	mu      sync.Mutex
	tunnels map[route]*tunnelStats
	refused []string
	open    map[net.Conn]bool
}

// route is one client (its certificate's common name) to one target.
type route struct{ client, target string }

// tunnelStats counts the tunnels of one route and their bytes: up from the
// client to the target, down back.
type tunnelStats struct {
	connects atomic.Int64
	up, down atomic.Int64
}

// counts is a copy of one route's figures.
type counts struct{ Connects, Up, Down int64 }

// startConnectProxy serves the proxy on addr with the serving certificate,
// verifying clients against clientCAs, until the test ends.
func startConnectProxy(t *testing.T, addr string, serving tls.Certificate, clientCAs *x509.CertPool, allowed []string) *connectProxy {
	t.Helper()
	p := &connectProxy{allowed: map[string]bool{}, tunnels: map[route]*tunnelStats{}, open: map[net.Conn]bool{}}
	for _, a := range allowed {
		p.allowed[a] = true
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the CONNECT proxy's listener: %v", err)
	}
	p.srv = &http.Server{
		Handler: p,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{serving},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clientCAs,
		},
		// HTTP/1.1 only: CONNECT hijacks the connection.
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the CONNECT proxy: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = p.srv.Close()
		<-done
		// Hijacked tunnels are the proxy's own to close.
		p.mu.Lock()
		for c := range p.open {
			_ = c.Close()
		}
		p.open = nil
		p.mu.Unlock()
	})
	return p
}

func (p *connectProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	target := r.URL.Host
	if !p.allowed[target] {
		p.mu.Lock()
		p.refused = append(p.refused, target)
		p.mu.Unlock()
		http.Error(w, "not a kube-apiserver of this plane", http.StatusForbidden)
		return
	}
	client := ""
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		client = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	up, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(r.Context(), "tcp", target)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	down, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	stats := p.stats(route{client, target})
	stats.connects.Add(1)
	if !p.track(up, down) {
		return
	}
	defer p.untrack(up, down)
	// Nothing may follow the answer: the client checks that it buffered
	// no byte beyond it.
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Counted as read, before the bytes are passed on: a client that got
	// an answer finds its bytes counted.
	go func() {
		_, _ = io.Copy(up, countingReader{brw.Reader, &stats.up})
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(down, countingReader{up, &stats.down})
}

func (p *connectProxy) stats(r route) *tunnelStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.tunnels[r]
	if s == nil {
		s = &tunnelStats{}
		p.tunnels[r] = s
	}
	return s
}

// track records an open tunnel's connections, false (both closed) when
// the proxy is closing.
func (p *connectProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.open[c] = true
	}
	return true
}

func (p *connectProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.open, c)
	}
}

// counts returns the figures of the tunnels from client to target.
func (p *connectProxy) counts(client, target string) counts {
	s := p.stats(route{client, target})
	return counts{Connects: s.connects.Load(), Up: s.up.Load(), Down: s.down.Load()}
}

// refusedTargets lists the CONNECTs to addresses outside the plane.
func (p *connectProxy) refusedTargets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
