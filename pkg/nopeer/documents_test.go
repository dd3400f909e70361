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

package nopeer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pairServer serves /api and /apis, each with its ETag and 304s, and
// records each request as "path|If-None-Match".
type pairServer struct {
	mu       sync.Mutex
	docs     map[string]string
	etags    map[string]string
	status   map[string]int
	requests []string
}

func newPairServer(t *testing.T) (*pairServer, *httptest.Server) {
	s := &pairServer{docs: map[string]string{}, etags: map[string]string{}, status: map[string]int{}}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func (s *pairServer) set(path, etag, doc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[path], s.etags[path] = doc, etag
}

func (s *pairServer) fail(path string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status[path] = status
}

func (s *pairServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.requests
	s.requests = nil
	return out
}

func (s *pairServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r.URL.Path+"|"+r.Header.Get("If-None-Match"))
	if st := s.status[r.URL.Path]; st != 0 {
		http.Error(w, "scripted failure", st)
		return
	}
	if etag := s.etags[r.URL.Path]; etag != "" && r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", s.etags[r.URL.Path])
	w.Header().Set("Content-Type", Accept)
	_, _ = w.Write([]byte(s.docs[r.URL.Path]))
}

func pairGroup(name, version, resource string) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: resource, Scope: apidiscoveryv2.ScopeNamespace,
				ResponseKind: &metav1.GroupVersionKind{Version: version, Kind: "K"}, Verbs: []string{"get"}}}}},
	}
}

// ReadDocuments' one behaviour for every combination of 304s: a document
// that answered 304 is the previous pair's (never read again), one that
// answered 200 is the new one, and any failure fails the pair.
func TestReadDocuments(t *testing.T) {
	core1, core2 := pairGroup("", "v1", "pods"), pairGroup("", "v1", "configmaps")
	apps1, apps2 := pairGroup("apps", "v1", "deployments"), pairGroup("apps", "v1", "statefulsets")
	for _, tc := range []struct {
		name string
		// what the server serves after the first read
		apiETag, apisETag string
		api, apis         apidiscoveryv2.APIGroupDiscovery
		failPath          string
		want              Documents
		notModified       bool
		requests          []string
		wantErr           bool
	}{
		{name: "both unchanged: two 304s", apiETag: `"api-1"`, apisETag: `"apis-1"`, api: core1, apis: apps1,
			want:        Documents{API: []apidiscoveryv2.APIGroupDiscovery{core1}, APIs: []apidiscoveryv2.APIGroupDiscovery{apps1}, APIETag: `"api-1"`, APIsETag: `"apis-1"`},
			notModified: true, requests: []string{`/api|"api-1"`, `/apis|"apis-1"`}},
		{name: "/api 304, /apis changed: /api is the previous copy, not read again", apiETag: `"api-1"`, apisETag: `"apis-2"`, api: core1, apis: apps2,
			want:     Documents{API: []apidiscoveryv2.APIGroupDiscovery{core1}, APIs: []apidiscoveryv2.APIGroupDiscovery{apps2}, APIETag: `"api-1"`, APIsETag: `"apis-2"`},
			requests: []string{`/api|"api-1"`, `/apis|"apis-1"`}},
		{name: "/apis 304, /api changed: /apis is the previous copy, not read again", apiETag: `"api-2"`, apisETag: `"apis-1"`, api: core2, apis: apps1,
			want:     Documents{API: []apidiscoveryv2.APIGroupDiscovery{core2}, APIs: []apidiscoveryv2.APIGroupDiscovery{apps1}, APIETag: `"api-2"`, APIsETag: `"apis-1"`},
			requests: []string{`/api|"api-1"`, `/apis|"apis-1"`}},
		{name: "both changed", apiETag: `"api-2"`, apisETag: `"apis-2"`, api: core2, apis: apps2,
			want:     Documents{API: []apidiscoveryv2.APIGroupDiscovery{core2}, APIs: []apidiscoveryv2.APIGroupDiscovery{apps2}, APIETag: `"api-2"`, APIsETag: `"apis-2"`},
			requests: []string{`/api|"api-1"`, `/apis|"apis-1"`}},
		{name: "/api fails", apiETag: `"api-1"`, apisETag: `"apis-2"`, api: core1, apis: apps2, failPath: "/api",
			wantErr: true, requests: []string{`/api|"api-1"`}},
		{name: "/apis fails after /api answered 304", apiETag: `"api-1"`, apisETag: `"apis-1"`, api: core1, apis: apps1, failPath: "/apis",
			wantErr: true, requests: []string{`/api|"api-1"`, `/apis|"apis-1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, ts := newPairServer(t)
			srv.set("/api", `"api-1"`, discoveryListJSON(t, core1))
			srv.set("/apis", `"apis-1"`, discoveryListJSON(t, apps1))
			c := NewClient(ts.Client(), 1<<20)
			ctx := context.Background()

			first, notModified, err := c.ReadDocuments(ctx, ts.URL, nil)
			if err != nil || notModified {
				t.Fatalf("first read: notModified %v, err %v", notModified, err)
			}
			if got := srv.seen(); !reflect.DeepEqual(got, []string{"/api|", "/apis|"}) {
				t.Fatalf("first read's requests %v: want no If-None-Match", got)
			}
			if want := (Documents{API: []apidiscoveryv2.APIGroupDiscovery{core1}, APIs: []apidiscoveryv2.APIGroupDiscovery{apps1}, APIETag: `"api-1"`, APIsETag: `"apis-1"`}); !reflect.DeepEqual(first, want) {
				t.Fatalf("first read %+v, want %+v", first, want)
			}

			srv.set("/api", tc.apiETag, discoveryListJSON(t, tc.api))
			srv.set("/apis", tc.apisETag, discoveryListJSON(t, tc.apis))
			if tc.failPath != "" {
				srv.fail(tc.failPath, http.StatusInternalServerError)
			}
			got, notModified, err := c.ReadDocuments(ctx, ts.URL, &first)
			if reqs := srv.seen(); !reflect.DeepEqual(reqs, tc.requests) {
				t.Errorf("requests %v, want %v", reqs, tc.requests)
			}
			if tc.wantErr {
				if readType(err) != ErrStatus || !reflect.DeepEqual(got, Documents{}) || notModified {
					t.Errorf("with %s failing: %+v, notModified %v, err %v; want an UnexpectedStatus error and no documents", tc.failPath, got, notModified, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if notModified != tc.notModified || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, notModified %v; want %+v, notModified %v", got, notModified, tc.want, tc.notModified)
			}
			// A reused document is the previous copy itself, not a new one.
			if got.APIETag == first.APIETag && len(got.API) > 0 && &got.API[0] != &first.API[0] {
				t.Error("/api answered 304 but is not the previous copy")
			}
			if got.APIsETag == first.APIsETag && len(got.APIs) > 0 && &got.APIs[0] != &first.APIs[0] {
				t.Error("/apis answered 304 but is not the previous copy")
			}
		})
	}
}
