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

package localcluster

import (
	"io"
	"net"
	"sync"
	"time"
)

// loadBalancer is a TCP (TLS pass-through) load balancer on the host side
// of the veth, in front of every kube-apiserver, like the load balancer of
// an HA control plane. peerdiscovery-apiserver reaches its core
// kube-apiserver through it, so a test can stop any kube-apiserver without
// cutting the extension server off the cluster. Each connection goes to the
// next backend in turn that accepts it.
type loadBalancer struct {
	ln       net.Listener
	backends func() []string

	mu     sync.Mutex
	next   int
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newLoadBalancer(ip string, backends func() []string) (*loadBalancer, error) {
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, "6443"))
	if err != nil {
		// Something on the host holds *:6443 without SO_REUSEADDR.
		ln, err = net.Listen("tcp4", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
	}
	lb := &loadBalancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	lb.wg.Add(1)
	go lb.serve()
	return lb, nil
}

// addr is host:port of the load balancer.
func (lb *loadBalancer) addr() string { return lb.ln.Addr().String() }

func (lb *loadBalancer) track(c net.Conn, add bool) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if add {
		if lb.closed {
			return false
		}
		lb.conns[c] = struct{}{}
	} else {
		delete(lb.conns, c)
	}
	return true
}

func (lb *loadBalancer) serve() {
	defer lb.wg.Done()
	for {
		c, err := lb.ln.Accept()
		if err != nil {
			return
		}
		if !lb.track(c, true) {
			c.Close()
			return
		}
		lb.wg.Add(1)
		go func() {
			defer lb.wg.Done()
			defer lb.track(c, false)
			defer c.Close()
			b := lb.dialBackend()
			if b == nil {
				return
			}
			if !lb.track(b, true) {
				b.Close()
				return
			}
			defer lb.track(b, false)
			defer b.Close()
			pipe(c, b)
		}()
	}
}

// dialBackend connects to the next backend that accepts a connection.
func (lb *loadBalancer) dialBackend() net.Conn {
	backends := lb.backends()
	if len(backends) == 0 {
		return nil
	}
	lb.mu.Lock()
	start := lb.next
	lb.next++
	lb.mu.Unlock()
	for i := range backends {
		addr := backends[(start+i)%len(backends)]
		if c, err := net.DialTimeout("tcp4", addr, 2*time.Second); err == nil {
			return c
		}
	}
	return nil
}

// pipe copies both ways until either side is done, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	// One direction ended; give the other a moment to drain, then cut.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	a.Close()
	b.Close()
}

// close stops accepting and cuts every connection.
func (lb *loadBalancer) close() {
	lb.mu.Lock()
	lb.closed = true
	for c := range lb.conns {
		c.Close()
	}
	lb.mu.Unlock()
	lb.ln.Close()
	lb.wg.Wait()
}
