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

// Package testrelay is a TCP relay for unit tests that can go silent, as a
// frozen or cut-off server does.
package testrelay

import (
	"net"
	"sync"
	"testing"
)

// Silent forwards TCP connections to a target until frozen; then it holds
// them open and forwards nothing more, in either direction.
type Silent struct {
	ln     net.Listener
	frozen chan struct{}
	once   sync.Once
}

// New listens on loopback and relays to target until the test ends.
func New(t testing.TB, target string) *Silent {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Silent{ln: ln, frozen: make(chan struct{})}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = up.Close() })
			go r.pipe(up, c)
			go r.pipe(c, up)
		}
	}()
	return r
}

func (r *Silent) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-r.frozen:
			return // hold both ends open, forward nothing more
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Freeze stops all forwarding, for good.
func (r *Silent) Freeze() { r.once.Do(func() { close(r.frozen) }) }

// Addr is where it listens (host:port).
func (r *Silent) Addr() string { return r.ln.Addr().String() }
