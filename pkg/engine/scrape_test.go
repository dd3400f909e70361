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
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
	testpki "sigs.k8s.io/peerdiscovery/test/pki"
)

const peerServerName = nopeer.DefaultPeerServerName

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

func scrapeType(err error) nopeer.ErrorType {
	var se *nopeer.ReadError
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

	doc, err := s.Scrape(scrapeCtx(t, time.Minute), ep, nil)
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
		if r.path != "/version" && (r.accept != nopeer.Accept || !strings.Contains(r.accept, "profile=nopeer")) {
			t.Errorf("%s: Accept %q, want %q", r.path, r.accept, nopeer.Accept)
		}
	}

	// Unchanged: two 304s.
	again, err := s.Scrape(scrapeCtx(t, time.Minute), ep, &nopeer.Documents{API: doc.API, APIs: doc.APIs, APIETag: doc.APIETag, APIsETag: doc.APIsETag})
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

	// /apis changed, /api did not: /api is the copy read before, not read
	// again (its 304 says it is what the peer serves now;
	// nopeer.ReadDocuments).
	changed := append(apisGroups[:1:1], grp("new.example.com", ver("v1", "widgets")))
	peer.setDoc("/apis", changed)
	third, err := s.Scrape(scrapeCtx(t, time.Minute), ep, &nopeer.Documents{API: doc.API, APIs: doc.APIs, APIETag: doc.APIETag, APIsETag: doc.APIsETag})
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
	if want := []string{"/api|" + doc.APIETag, "/apis|" + doc.APIsETag, "/version|"}; !reflect.DeepEqual(paths, want) {
		t.Errorf("requests %v, want %v", paths, want)
	}
}

func TestScrapeWithoutETagHashesTheDocument(t *testing.T) {
	peer := newGoodPeer(t)
	peer.noETag = true
	doc, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), tlsPeer(t, testPKI(t).good, peer), nil)
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
	doc, err := newTestScraper(t, 1<<20).Scrape(scrapeCtx(t, time.Minute), tlsPeer(t, testPKI(t).good, peer), nil)
	if err != nil {
		t.Fatalf("Scrape: %v", err)
	}
	if !reflect.DeepEqual(doc.APIs, apisGroups) {
		t.Errorf("APIs: %+v", doc.APIs)
	}
}
