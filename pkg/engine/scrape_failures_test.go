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

package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

func TestScrapeFailures(t *testing.T) {
	p := testPKI(t)
	answer := func(status int, body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/version" {
				_, _ = w.Write(versionJSON)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		})
	}
	typed := func(contentType, body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/version" {
				_, _ = w.Write(versionJSON)
				return
			}
			w.Header().Set("Content-Type", contentType)
			_, _ = w.Write([]byte(body))
		})
	}
	good := string(listJSON(t, apisGroups))
	dup := string(listJSON(t, []apidiscoveryv2.APIGroupDiscovery{apisGroups[0], apisGroups[0]}))
	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T) string
		want     nopeer.ErrorType
		check    func(t *testing.T, err error)
	}{
		{
			name:     "500",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.good, answer(500, "etcd is sad")) },
			want:     nopeer.ErrStatus,
			check: func(t *testing.T, err error) {
				if !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "etcd is sad") {
					t.Errorf("error %q lacks the status and body", err)
				}
			},
		},
		{
			name: "garbage JSON",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, answer(200, `{"kind": "APIGroupDiscoveryList", "items": [{`))
			},
			want: nopeer.ErrDecode,
		},
		{
			name: "not a discovery list",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, answer(200, `{"kind":"APIGroupList","groups":[]}`))
			},
			want: nopeer.ErrDecode,
		},
		{
			name: "garbage /version",
			endpoint: func(t *testing.T) string {
				peer := newGoodPeer(t)
				return tlsPeer(t, p.good, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/version" {
						_, _ = w.Write([]byte("<html>"))
						return
					}
					peer.ServeHTTP(w, r)
				}))
			},
			want: nopeer.ErrDecode,
		},
		{
			name: "HTML from a proxy",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, typed("text/html; charset=utf-8", "<html>login</html>"))
			},
			want: nopeer.ErrMediaType,
			check: func(t *testing.T, err error) {
				if !strings.Contains(err.Error(), "text/html") {
					t.Errorf("error %q does not name the Content-Type", err)
				}
			},
		},
		{
			name: "protobuf",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, typed("application/vnd.kubernetes.protobuf", good))
			},
			want: nopeer.ErrMediaType,
		},
		{
			name: "another discovery version",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, typed("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", good))
			},
			want: nopeer.ErrMediaType,
			check: func(t *testing.T, err error) {
				if !strings.Contains(err.Error(), "v=v2beta1") {
					t.Errorf("error %q does not say what was wrong", err)
				}
			},
		},
		{
			name:     "duplicate groups",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.good, answer(200, dup)) },
			want:     nopeer.ErrInvalid,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, merge.ErrInvalidDocument) {
					t.Errorf("error %v does not wrap merge.ErrInvalidDocument", err)
				}
			},
		},
		{
			name:     "wrong CA",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.wrong, newGoodPeer(t)) },
			want:     nopeer.ErrTLS,
		},
		{
			name:     "right CA, wrong name",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.ca.Serving(t, "evil.example.com"), newGoodPeer(t)) },
			want:     nopeer.ErrTLS,
		},
		{
			name: "connection refused",
			endpoint: func(t *testing.T) string {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := l.Addr().String()
				_ = l.Close()
				return addr
			},
			want: nopeer.ErrRefused,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), tc.endpoint(t), nil)
			if got := scrapeType(err); got != tc.want {
				t.Fatalf("error %v: type %q, want %q", err, got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, err)
			}
		})
	}
}

// A redirect is a failure and is never followed: it could carry the
// server's credentials anywhere.
func TestScrapeRedirectNotFollowed(t *testing.T) {
	target := newGoodPeer(t)
	targetEP := tlsPeer(t, testPKI(t).good, target)
	ep := tlsPeer(t, testPKI(t).good, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://"+targetEP+r.URL.Path, http.StatusFound)
	}))
	_, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), ep, nil)
	if got := scrapeType(err); got != nopeer.ErrRedirect {
		t.Fatalf("error %v: type %q, want %q", err, got, nopeer.ErrRedirect)
	}
	if !strings.Contains(err.Error(), targetEP) {
		t.Errorf("error %q does not name the refused location", err)
	}
	if reqs := target.requests(); len(reqs) != 0 {
		t.Errorf("the redirect target received %d requests", len(reqs))
	}
}

// A peer that completes the TLS handshake and then never answers: the
// scrape ends at its context's deadline, long before the hang ends (at the
// end of the test).
func TestScrapeHangAfterHandshake(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hangEnds := make(chan struct{})
	handshaken := make(chan struct{}, 16)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(hangEnds)
		_ = l.Close()
		wg.Wait()
	})
	cfg := &tls.Config{Certificates: []tls.Certificate{testPKI(t).good}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				tc := tls.Server(c, cfg)
				if err := tc.Handshake(); err != nil {
					return
				}
				handshaken <- struct{}{}
				<-hangEnds
			}()
		}
	}()

	ctx := scrapeCtx(t, 300*time.Millisecond)
	_, err = newTestScraper(t, 1<<20).Scrape(ctx, l.Addr().String(), nil)
	if got := scrapeType(err); got != nopeer.ErrTimeout {
		t.Fatalf("error %v: type %q, want %q", err, got, nopeer.ErrTimeout)
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("the scrape returned before its deadline: %v", ctx.Err())
	}
	select {
	case <-handshaken:
	default:
		t.Error("the scrape never got past the handshake: the hang was not exercised")
	}
	select {
	case <-hangEnds:
		t.Error("the hang ended before the scrape")
	default:
	}
}

// A peer that sends its headers and part of the body, then stalls.
func TestScrapeHangMidBody(t *testing.T) {
	hangEnds := make(chan struct{})
	ep := tlsPeer(t, testPKI(t).good, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"APIGroupDiscoveryList","items":[`))
		w.(http.Flusher).Flush()
		select {
		case <-hangEnds:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hangEnds) }) // before the server's Close
	ctx := scrapeCtx(t, 300*time.Millisecond)
	_, err := newTestScraper(t, 1<<20).Scrape(ctx, ep, nil)
	if got := scrapeType(err); got != nopeer.ErrTimeout {
		t.Fatalf("error %v: type %q, want %q", err, got, nopeer.ErrTimeout)
	}
}

// A 100 MB answer is cut at the cap: the scraper streams it, never holding
// more than the cap, and the peer is not read to the end.
func TestScrapeOversized(t *testing.T) {
	const total = 100 << 20
	const maxBytes = 1 << 20
	var written atomic.Int64
	handlerDone := make(chan struct{})
	ep := tlsPeer(t, testPKI(t).good, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		w.Header().Set("Content-Type", "application/json")
		head := []byte(`{"kind":"APIGroupDiscoveryList","items":[`)
		n, _ := w.Write(head)
		written.Add(int64(n))
		chunk := []byte(strings.Repeat(" ", 64<<10)) // valid JSON whitespace
		for written.Load() < total {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	s := newTestScraper(t, maxBytes)

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := s.Scrape(scrapeCtx(t, time.Minute), ep, nil)
	runtime.ReadMemStats(&after)
	if got := scrapeType(err); got != nopeer.ErrOversized {
		t.Fatalf("error %v: type %q, want %q", err, got, nopeer.ErrOversized)
	}
	// Everything allocated during the scrape (server side included) stays
	// far below the 100 MB the peer offered.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("allocated %d MiB during an oversized scrape capped at 1 MiB", grew>>20)
	}
	if after.HeapAlloc > before.HeapAlloc && after.HeapAlloc-before.HeapAlloc > 32<<20 {
		t.Errorf("heap grew by %d MiB", (after.HeapAlloc-before.HeapAlloc)>>20)
	}
	select {
	case <-handlerDone:
	case <-time.After(waitTimeout):
		t.Fatal("the peer kept sending after the scraper gave up")
	}
	if w := written.Load(); w >= total {
		t.Errorf("the peer sent all %d bytes: the body was read to the end", w)
	}
}

func TestScrapeSizeCapBoundary(t *testing.T) {
	peer := newGoodPeer(t)
	ep := tlsPeer(t, testPKI(t).good, peer)
	size := int64(max(len(listJSON(t, coreGroups)), len(listJSON(t, apisGroups)), len(versionJSON)))
	if _, err := newTestScraper(t, size).Scrape(scrapeCtx(t, time.Minute), ep, nil); err != nil {
		t.Errorf("a document of exactly the cap: %v", err)
	}
	_, err := newTestScraper(t, size-1).Scrape(scrapeCtx(t, time.Minute), ep, nil)
	if got := scrapeType(err); got != nopeer.ErrOversized {
		t.Errorf("a document one byte over the cap: %v", err)
	}
}
