package engine

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
	testpki "sigs.k8s.io/peerdiscovery/test/pki"
)

const peerServerName = "kubernetes.default.svc"

// ---- certificates ----

type peerPKI struct {
	ca, wrongCA *testpki.CA
	good, wrong tls.Certificate
}

var (
	pkiOnce sync.Once
	thePKI  peerPKI
)

// testPKI: a CA signing a serving certificate for kubernetes.default.svc,
// and a second, wrong CA signing one for the same name.
func testPKI(t *testing.T) peerPKI {
	pkiOnce.Do(func() {
		thePKI.ca = testpki.NewCA(t, "peer-ca")
		thePKI.wrongCA = testpki.NewCA(t, "wrong-ca")
		thePKI.good = thePKI.ca.Serving(t, peerServerName)
		thePKI.wrong = thePKI.wrongCA.Serving(t, peerServerName)
	})
	return thePKI
}

// tlsPeer starts an HTTPS server with the certificate and returns its
// host:port.
func tlsPeer(t *testing.T, cert tls.Certificate, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func newTestScraper(t *testing.T, maxBytes int64) *Scraper {
	t.Helper()
	s, err := NewScraper(&rest.Config{BearerToken: "t"}, testPKI(t).ca.CertPEM, peerServerName, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func scrapeCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ---- documents ----

func listJSON(t *testing.T, items []apidiscoveryv2.APIGroupDiscovery) []byte {
	t.Helper()
	b, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{APIVersion: "apidiscovery.k8s.io/v2", Kind: "APIGroupDiscoveryList"},
		Items:    items,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	coreGroups = []apidiscoveryv2.APIGroupDiscovery{grp("", ver("v1", "pods", "configmaps"))}
	apisGroups = []apidiscoveryv2.APIGroupDiscovery{
		grp("apps", ver("v1", "deployments", "statefulsets")),
		grp("batch", ver("v1", "jobs", "cronjobs")),
	}
	versionJSON = func() []byte {
		b, _ := json.Marshal(version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"})
		return b
	}()
)

// ---- a good peer ----

type seenRequest struct {
	path, accept, auth, ifNoneMatch string
}

// goodPeer answers /api, /apis (with ETags, honouring If-None-Match) and
// /version, and records what it was asked.
type goodPeer struct {
	t        *testing.T
	mu       sync.Mutex
	seen     []seenRequest
	docs     map[string][]byte
	etags    map[string]string
	noETag   bool
	noAccept bool // answers as a server without profile=nopeer support
}

func newGoodPeer(t *testing.T) *goodPeer {
	p := &goodPeer{t: t, docs: map[string][]byte{}, etags: map[string]string{}}
	p.setDoc("/api", coreGroups)
	p.setDoc("/apis", apisGroups)
	return p
}

func (p *goodPeer) setDoc(path string, items []apidiscoveryv2.APIGroupDiscovery) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.docs[path] = listJSON(p.t, items)
	p.etags[path] = fmt.Sprintf("%q", fmt.Sprintf("%s-%d", path, len(p.seen)))
}

func (p *goodPeer) requests() []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenRequest(nil), p.seen...)
}

func (p *goodPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, seenRequest{path: r.URL.Path, accept: r.Header.Get("Accept"), auth: r.Header.Get("Authorization"), ifNoneMatch: r.Header.Get("If-None-Match")})
	doc, etag, noETag, noAccept := p.docs[r.URL.Path], p.etags[r.URL.Path], p.noETag, p.noAccept
	p.mu.Unlock()
	switch r.URL.Path {
	case "/api", "/apis":
		if !noETag {
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", etag)
		}
		if noAccept {
			w.Header().Set("Content-Type", "application/json")
		} else {
			w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer")
		}
		_, _ = w.Write(doc)
	case "/version":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(versionJSON)
	default:
		http.NotFound(w, r)
	}
}

func scrapeType(err error) ErrorType {
	var se *ScrapeError
	if errors.As(err, &se) {
		return se.Type
	}
	return ""
}

// ---- tests ----

func TestScrapeGoodPeer(t *testing.T) {
	peer := newGoodPeer(t)
	ep := tlsPeer(t, testPKI(t).good, peer)
	s := newTestScraper(t, 1<<20)

	doc, err := s.Scrape(scrapeCtx(t, time.Minute), ep, "", "")
	if err != nil {
		t.Fatalf("Scrape: %v", err)
	}
	if !reflect.DeepEqual(doc.API, coreGroups) || !reflect.DeepEqual(doc.APIs, apisGroups) {
		t.Errorf("documents differ:\n%+v\n%+v", doc.API, doc.APIs)
	}
	if doc.APIETag != `"/api-0"` || doc.APIsETag != `"/apis-0"` || doc.Version != "v1.37.2" || doc.NotModified {
		t.Errorf("doc: etags %q %q version %q notModified %v", doc.APIETag, doc.APIsETag, doc.Version, doc.NotModified)
	}
	reqs := peer.requests()
	if len(reqs) != 3 {
		t.Fatalf("requests: %+v", reqs)
	}
	for _, r := range reqs {
		if r.auth != "Bearer t" {
			t.Errorf("%s: Authorization %q, want the bearer token", r.path, r.auth)
		}
		if r.ifNoneMatch != "" {
			t.Errorf("%s: If-None-Match %q on a first read", r.path, r.ifNoneMatch)
		}
		if r.path != "/version" && (r.accept != AcceptNoPeer || !strings.Contains(r.accept, "profile=nopeer")) {
			t.Errorf("%s: Accept %q, want %q", r.path, r.accept, AcceptNoPeer)
		}
	}

	// Unchanged: two 304s.
	again, err := s.Scrape(scrapeCtx(t, time.Minute), ep, doc.APIETag, doc.APIsETag)
	if err != nil {
		t.Fatal(err)
	}
	if !again.NotModified || again.API != nil || again.APIs != nil || again.APIETag != doc.APIETag || again.APIsETag != doc.APIsETag || again.Version != "v1.37.2" {
		t.Errorf("unchanged scrape: %+v", again)
	}
	reqs = peer.requests()[3:]
	if reqs[0].ifNoneMatch != doc.APIETag || reqs[1].ifNoneMatch != doc.APIsETag {
		t.Errorf("If-None-Match not sent: %+v", reqs)
	}

	// /apis changed, /api did not: /api is read again so the pair is one
	// consistent read.
	changed := append(apisGroups[:1:1], grp("new.example.com", ver("v1", "widgets")))
	peer.setDoc("/apis", changed)
	third, err := s.Scrape(scrapeCtx(t, time.Minute), ep, doc.APIETag, doc.APIsETag)
	if err != nil {
		t.Fatal(err)
	}
	if third.NotModified || !reflect.DeepEqual(third.API, coreGroups) || !reflect.DeepEqual(third.APIs, changed) ||
		third.APIETag != doc.APIETag || third.APIsETag == doc.APIsETag {
		t.Errorf("half-changed scrape: %+v", third)
	}
	var paths []string
	for _, r := range peer.requests()[6:] {
		paths = append(paths, r.path+"|"+r.ifNoneMatch)
	}
	if want := []string{"/api|" + doc.APIETag, "/apis|" + doc.APIsETag, "/api|", "/version|"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("requests %v, want %v", paths, want)
	}
}

func TestScrapeWithoutETagHashesTheDocument(t *testing.T) {
	peer := newGoodPeer(t)
	peer.noETag = true
	doc, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), tlsPeer(t, testPKI(t).good, peer), "", "")
	if err != nil {
		t.Fatal(err)
	}
	wantAPI, _ := merge.ETag(coreGroups)
	wantAPIs, _ := merge.ETag(apisGroups)
	if doc.APIETag != wantAPI || doc.APIsETag != wantAPIs {
		t.Errorf("ETags %q %q, want the documents' hashes %q %q", doc.APIETag, doc.APIsETag, wantAPI, wantAPIs)
	}
}

// A server that does not know profile=nopeer ignores it and answers its
// own discovery without the profile: accepted.
func TestScrapeServerWithoutNoPeerProfile(t *testing.T) {
	peer := newGoodPeer(t)
	peer.noAccept = true
	doc, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), tlsPeer(t, testPKI(t).good, peer), "", "")
	if err != nil {
		t.Fatalf("Scrape: %v", err)
	}
	if !reflect.DeepEqual(doc.APIs, apisGroups) {
		t.Errorf("APIs: %+v", doc.APIs)
	}
}

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
		want     ErrorType
		check    func(t *testing.T, err error)
	}{
		{
			name:     "500",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.good, answer(500, "etcd is sad")) },
			want:     ErrStatus,
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
			want: ErrDecode,
		},
		{
			name: "not a discovery list",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, answer(200, `{"kind":"APIGroupList","groups":[]}`))
			},
			want: ErrDecode,
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
			want: ErrDecode,
		},
		{
			name: "HTML from a proxy",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, typed("text/html; charset=utf-8", "<html>login</html>"))
			},
			want: ErrMediaType,
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
			want: ErrMediaType,
		},
		{
			name: "another discovery version",
			endpoint: func(t *testing.T) string {
				return tlsPeer(t, p.good, typed("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", good))
			},
			want: ErrMediaType,
			check: func(t *testing.T, err error) {
				if !strings.Contains(err.Error(), "v=v2beta1") {
					t.Errorf("error %q does not say what was wrong", err)
				}
			},
		},
		{
			name:     "duplicate groups",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.good, answer(200, dup)) },
			want:     ErrInvalid,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, merge.ErrInvalidDocument) {
					t.Errorf("error %v does not wrap merge.ErrInvalidDocument", err)
				}
			},
		},
		{
			name:     "wrong CA",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.wrong, newGoodPeer(t)) },
			want:     ErrTLS,
		},
		{
			name:     "right CA, wrong name",
			endpoint: func(t *testing.T) string { return tlsPeer(t, p.ca.Serving(t, "evil.example.com"), newGoodPeer(t)) },
			want:     ErrTLS,
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
			want: ErrRefused,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), tc.endpoint(t), "", "")
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
	_, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), ep, "", "")
	if got := scrapeType(err); got != ErrRedirect {
		t.Fatalf("error %v: type %q, want %q", err, got, ErrRedirect)
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
	_, err = newTestScraper(t, 1<<20).Scrape(ctx, l.Addr().String(), "", "")
	if got := scrapeType(err); got != ErrTimeout {
		t.Fatalf("error %v: type %q, want %q", err, got, ErrTimeout)
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
	_, err := newTestScraper(t, 1<<20).Scrape(ctx, ep, "", "")
	if got := scrapeType(err); got != ErrTimeout {
		t.Fatalf("error %v: type %q, want %q", err, got, ErrTimeout)
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
	_, err := s.Scrape(scrapeCtx(t, time.Minute), ep, "", "")
	runtime.ReadMemStats(&after)
	if got := scrapeType(err); got != ErrOversized {
		t.Fatalf("error %v: type %q, want %q", err, got, ErrOversized)
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
	if _, err := newTestScraper(t, size).Scrape(scrapeCtx(t, time.Minute), ep, "", ""); err != nil {
		t.Errorf("a document of exactly the cap: %v", err)
	}
	_, err := newTestScraper(t, size-1).Scrape(scrapeCtx(t, time.Minute), ep, "", "")
	if got := scrapeType(err); got != ErrOversized {
		t.Errorf("a document one byte over the cap: %v", err)
	}
}

// Documents decode within a memory budget: while it is taken, a scrape
// waits for it up to its deadline, and then fails with a clear timeout.
func TestScrapeDecodesWithinTheMemoryBudget(t *testing.T) {
	s := newTestScraper(t, 1<<20)
	endpoint := tlsPeer(t, testPKI(t).good, newGoodPeer(t))
	all := s.maxBytes * decodeFactor
	if err := s.decode.Acquire(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	_, err := s.Scrape(scrapeCtx(t, 300*time.Millisecond), endpoint, "", "")
	var se *ScrapeError
	if !errors.As(err, &se) || se.Type != ErrTimeout || !strings.Contains(err.Error(), "waiting for memory") {
		t.Fatalf("scrape with the budget taken: %v, want a Timeout waiting for memory", err)
	}
	s.decode.Release(all)
	if _, err := s.Scrape(scrapeCtx(t, time.Minute), endpoint, "", ""); err != nil {
		t.Fatalf("scrape with the budget free: %v", err)
	}
	// Nothing is left taken after successful scrapes.
	if !s.decode.TryAcquire(all) {
		t.Fatal("the decode budget leaked")
	}
}
