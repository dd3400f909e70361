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
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

func TestProxyRelaysRequestAndResponse(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Peer", "b")
		w.Header().Add("Warning", `299 - "first"`)
		w.Header().Add("Warning", `299 - "second"`)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"Widget","metadata":{"name":"w1"}}`)
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	resetUpstreamMetrics()

	const body = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"size":3}}`
	// An unsorted, repeated, escaped query must arrive byte for byte.
	const query = "fieldManager=kubectl&dryRun=All&b=2&a=1&a=%2F3&labelSelector=app%3Dx"
	req := e.newRequest(http.MethodPost, "/apis/example.com/v1/namespaces/ns1/widgets?"+query, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Custom", "kept")
	resp := e.do(req)
	got := readBody(t, resp)
	if resp.StatusCode != http.StatusCreated || got != `{"kind":"Widget","metadata":{"name":"w1"}}` {
		t.Fatalf("relayed %d %q", resp.StatusCode, got)
	}
	if resp.Header.Get("X-Peer") != "b" || resp.Header.Get("Content-Type") != "application/json" ||
		!reflect.DeepEqual(resp.Header.Values("Warning"), []string{`299 - "first"`, `299 - "second"`}) {
		t.Fatalf("response headers not relayed: %v", resp.Header)
	}
	seen := peer.requests()
	if len(seen) != 1 {
		t.Fatalf("peer got %d requests", len(seen))
	}
	s := seen[0]
	if s.Method != http.MethodPost || s.Path != "/apis/example.com/v1/namespaces/ns1/widgets" || s.RawQuery != query || s.Body != body {
		t.Fatalf("peer saw %s %s?%s %q", s.Method, s.Path, s.RawQuery, s.Body)
	}
	if s.Header.Get("Content-Type") != "application/json" || s.Header.Get("X-Custom") != "kept" {
		t.Fatalf("request headers not relayed: %v", s.Header)
	}
	if s.Host != peer.endpoint() {
		t.Errorf("Host = %q, want the peer's endpoint %q", s.Host, peer.endpoint())
	}
	checkProxiedAsAlice(t, s)
	if e.local.calls.Load() != 0 {
		t.Fatal("local chain called")
	}
	if v := counterValue(t, "apiserver_rerouted_request_total", map[string]string{"code": "201", "group": "example.com", "version": "v1", "resource": "widgets"}); v != 1 {
		t.Fatalf("apiserver_rerouted_request_total{code=201} = %v, want 1", v)
	}
}

func TestProxyReplacesClientIdentityHeaders(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))

	forge := func(req *http.Request) {
		req.Header.Set("X-Remote-User", "mallory")
		req.Header.Set("X-Remote-Uid", "uid-mallory")
		req.Header.Add("X-Remote-Group", "system:masters")
		req.Header.Add("X-Remote-Group", "devs")
		req.Header.Set("X-Remote-Extra-Scopes", "admin")
		req.Header.Set("X-Remote-Extra-Forged", "yes")
		req.Header["x-remote-extra-lower"] = []string{"yes"}
	}
	t.Run("alice", func(t *testing.T) {
		req := e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil)
		forge(req)
		readBody(t, e.do(req))
		seen := peer.requests()
		checkProxiedAsAlice(t, seen[len(seen)-1])
	})
	t.Run("user without uid, groups or extra", func(t *testing.T) {
		e.user.Store(&user.DefaultInfo{Name: "bob"})
		defer e.user.Store(alice())
		req := e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil)
		forge(req)
		readBody(t, e.do(req))
		seen := peer.requests()
		s := seen[len(seen)-1]
		if got, want := remoteHeaders(s.Header), (http.Header{"X-Remote-User": {"bob"}}); !reflect.DeepEqual(got, want) {
			t.Fatalf("peer saw %v, want %v", got, want)
		}
		if s.User == nil || s.User.GetName() != "bob" || s.User.GetUID() != "" || len(s.User.GetGroups()) != 0 || len(s.User.GetExtra()) != 0 {
			t.Fatalf("peer authenticated %#v", s.User)
		}
	})
}

func TestProxyWithoutUserIsAnError(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(nil)
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	req := httptest.NewRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil)
	info, _ := routing.RequestInfoFactory.NewRequestInfo(req)
	req = req.WithContext(apirequest.WithRequestInfo(req.Context(), info))
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || len(peer.requests()) != 0 {
		t.Fatalf("code %d, peer requests %d: an anonymous context must never be proxied", rec.Code, len(peer.requests()))
	}
}

// TestProxyRejectsRedirects: a peer's redirect is never followed or relayed.
func TestProxyRejectsRedirects(t *testing.T) {
	e := newEnv(t)
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/widgets", nil))
	readBody(t, resp)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
		t.Fatalf("status %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestProxyStreamsWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOption
	}{{"front HTTP/1.1", nil}, {"front HTTP/2", []envOption{frontHTTP2}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			release := make(chan struct{})
			events := []string{
				`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"11"}}}`,
				`{"type":"MODIFIED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"12"}}}`,
				`{"type":"DELETED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"13"}}}`,
			}
			peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Transfer-Encoding", "chunked")
				w.WriteHeader(http.StatusOK)
				flusher := w.(http.Flusher)
				_, _ = io.WriteString(w, events[0]+"\n")
				flusher.Flush()
				// The rest only once the client has the first event.
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				for _, ev := range events[1:] {
					_, _ = io.WriteString(w, ev+"\n")
					flusher.Flush()
				}
			})
			var once bool
			releaseOnce := func() {
				if !once {
					once = true
					close(release)
				}
			}
			t.Cleanup(releaseOnce) // runs before the peer is closed
			e.setLocal()
			e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))

			resp := e.do(e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets?watch=true&resourceVersion=10&allowWatchBookmarks=true", nil))
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %v", resp.StatusCode, resp.Header)
			}
			dec := json.NewDecoder(resp.Body)
			var got []string
			next := func() {
				var ev json.RawMessage
				if err := dec.Decode(&ev); err != nil {
					t.Fatalf("after %d events: %v", len(got), err)
				}
				got = append(got, string(ev))
			}
			// If the proxy buffered, this would wait for the peer, which
			// waits for us.
			next()
			releaseOnce()
			next()
			next()
			if !reflect.DeepEqual(got, events) {
				t.Fatalf("events %v\nwant %v", got, events)
			}
			if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
				t.Fatalf("after the last event: %v, want EOF", err)
			}
			s := peer.requests()[0]
			if s.RawQuery != "watch=true&resourceVersion=10&allowWatchBookmarks=true" {
				t.Fatalf("query %q", s.RawQuery)
			}
			checkProxiedAsAlice(t, s)
		})
	}
}

// TestProxyUpgradeCarriesIdentity: exec, attach and port-forward are
// upgrades; they must reach the peer with the user's identity (upstream
// loses it) and stream both ways.
func TestProxyUpgradeCarriesIdentity(t *testing.T) {
	for _, firstRefuses := range []bool{false, true} {
		t.Run(fmt.Sprintf("first candidate refuses=%v", firstRefuses), func(t *testing.T) {
			e := newEnv(t)
			peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
				conn, brw, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
				_ = brw.Flush()
				line, err := brw.ReadString('\n')
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = brw.WriteString("echo: " + line)
				_ = brw.Flush()
			})
			e.setLocal()
			if firstRefuses {
				ids := order("p1", "p2")
				e.setRoutes(route(podsGVR, readyPeer(ids[0], closedEndpoint(t)), readyPeer(ids[1], peer.endpoint())))
			} else {
				e.setRoutes(route(podsGVR, readyPeer("b", peer.endpoint())))
			}

			conn, err := net.Dial("tcp", e.front.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			const path = "/api/v1/namespaces/ns1/pods/p1/exec?command=sh&stdin=true&stdout=true"
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"+
				"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Remote-User: mallory\r\nX-Remote-Group: system:masters\r\n\r\n", path)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "SPDY/3.1" {
				t.Fatalf("upgrade answered %d %v", resp.StatusCode, resp.Header)
			}
			if _, err := io.WriteString(conn, "ping\n"); err != nil {
				t.Fatal(err)
			}
			line, err := br.ReadString('\n')
			if err != nil || line != "echo: ping\n" {
				t.Fatalf("stream: %q, %v", line, err)
			}
			seen := peer.requests()
			if len(seen) != 1 {
				t.Fatalf("peer got %d requests", len(seen))
			}
			s := seen[0]
			if s.Method != http.MethodPost || s.Path+"?"+s.RawQuery != path || s.Header.Get("Upgrade") != "SPDY/3.1" ||
				s.Header.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
				t.Fatalf("peer saw %s %s?%s %v", s.Method, s.Path, s.RawQuery, s.Header)
			}
			checkProxiedAsAlice(t, s)
		})
	}
}

// TestProxyKeepsTheClientsAcceptEncoding: the peer sees the client's
// Accept-Encoding, no other. A request without one reaches the peer
// without one (the answer is not compressed by the peer and inflated
// here), and a gzip answer the client asked for comes back compressed.
func TestProxyKeepsTheClientsAcceptEncoding(t *testing.T) {
	e := newEnv(t)
	body := strings.Repeat(`{"kind":"Widget"}`, 1000)
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Accept-Encoding") != "gzip" {
			_, _ = io.WriteString(w, body)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, body)
		_ = zw.Close()
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	// A client that sends no Accept-Encoding of its own.
	tr := e.client.Transport.(*http.Transport).Clone()
	tr.DisableCompression = true
	e.client = &http.Client{Transport: tr}
	for _, enc := range []string{"", "gzip"} {
		req := e.newRequest(http.MethodGet, "/apis/example.com/v1/namespaces/ns1/widgets", nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		resp := e.do(req)
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("Accept-Encoding %q: %d, %v", enc, resp.StatusCode, err)
		}
		seen := peer.requests()
		if sent := seen[len(seen)-1].Header.Get("Accept-Encoding"); sent != enc {
			t.Errorf("the client sent Accept-Encoding %q, the peer saw %q", enc, sent)
		}
		if ce := resp.Header.Get("Content-Encoding"); ce != enc {
			t.Errorf("Accept-Encoding %q: the answer's Content-Encoding is %q", enc, ce)
		}
		if enc == "" && string(got) != body {
			t.Errorf("the answer is not the peer's: %d bytes", len(got))
		}
	}
}
