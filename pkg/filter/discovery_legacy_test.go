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
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

var (
	csrGVR = schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "certificatesigningrequests"}
	ctbGVR = schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"}
	svmGVR = schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}
	depGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	gonGVR = schema.GroupVersionResource{Group: "departed.example.com", Version: "v1", Resource: "ghosts"}
)

// The peer's answers: its own resource lists and OpenAPI v3.
const (
	peerCertsList    = `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"certificates.k8s.io/v1","resources":[{"name":"certificatesigningrequests","singularName":"certificatesigningrequest","namespaced":false,"kind":"CertificateSigningRequest","verbs":["get"],"storageVersionHash":"peer-csr"},{"name":"clustertrustbundles","singularName":"clustertrustbundle","namespaced":false,"kind":"ClusterTrustBundle","verbs":["get"],"storageVersionHash":"peer-ctb"}]}` + "\n"
	peerOpenAPIRoot  = `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=PEERCORE"},"apis/certificates.k8s.io/v1":{"serverRelativeURL":"/openapi/v3/apis/certificates.k8s.io/v1?hash=PEERCERTS"},"apis/storagemigration.k8s.io/v1":{"serverRelativeURL":"/openapi/v3/apis/storagemigration.k8s.io/v1?hash=PEERSVM"}}}`
	localOpenAPIRoot = `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=LOCALCORE"},"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=LOCALAPPS"},"apis/certificates.k8s.io/v1":{"serverRelativeURL":"/openapi/v3/apis/certificates.k8s.io/v1?hash=LOCALCERTS"}}}`
)

func peerDiscoveryAnswers(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/apis/certificates.k8s.io/v1":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, peerCertsList)
	case r.URL.Path == "/openapi/v3":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, peerOpenAPIRoot)
	case r.URL.Path == "/openapi/v3/apis/certificates.k8s.io/v1" && r.URL.Query().Get("hash") != "PEERCERTS":
		// kube-openapi's handler3: a stale hash is redirected to the current.
		http.Redirect(w, r, r.URL.Path+"?hash=PEERCERTS", http.StatusMovedPermanently)
	case r.URL.Path == "/openapi/v3/apis/storagemigration.k8s.io/v1" && r.URL.Query().Get("hash") == "offsite":
		http.Redirect(w, r, "https://elsewhere.example.com/openapi/v3/apis/x/v1", http.StatusMovedPermanently)
	case strings.HasPrefix(r.URL.Path, "/openapi/v3/"):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, immutable")
		_, _ = io.WriteString(w, `{"openapi":"3.0.0","info":{"title":"peer `+r.URL.Path+`"}}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"APIResourceList","groupVersion":"peer"}`)
	}
}

// legacyEnv is this server at v1.36 beside a v1.37 peer: the peer also
// serves ClusterTrustBundles (in a group-version this server serves in
// part) and StorageVersionMigrations (a group-version this server lacks); a
// departed server served departed.example.com/v1.
func legacyEnv(t *testing.T) (*env, *testPeer) {
	e := newEnv(t)
	peer := e.newPeer(peerDiscoveryAnswers)
	ep := peer.endpoint()
	e.setRoutes(
		route(podsGVR, readyPeer(selfID, "self:1"), readyPeer("p1", ep)),
		route(depGVR, readyPeer(selfID, "self:1"), readyPeer("p1", ep)),
		route(csrGVR, readyPeer(selfID, "self:1"), readyPeer("p1", ep)),
		route(ctbGVR, readyPeer("p1", ep)),
		route(svmGVR, readyPeer("p1", ep)),
		route(gonGVR, v1alpha1.RoutingPeer{ServerID: "gone", Endpoint: "gone:1", Left: true}),
	)
	e.setLocalDiscovery(
		[]apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods")},
		[]apidiscoveryv2.APIGroupDiscovery{dgroup("apps", "v1", "deployments"), dgroup("certificates.k8s.io", "v1", "certificatesigningrequests")},
	)
	e.f.views.Routes.SetMerged(mergedDiscovery(t, "1",
		[]apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods")},
		[]apidiscoveryv2.APIGroupDiscovery{
			dgroup("apps", "v1", "deployments"),
			dgroup("certificates.k8s.io", "v1", "certificatesigningrequests", "clustertrustbundles"),
			dgroup("storagemigration.k8s.io", "v1", "storageversionmigrations"),
		}))
	openapi := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/openapi/v3" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, localOpenAPIRoot)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	})
	e.local.respond.Store(&openapi)
	return e, peer
}

func (e *env) get(t *testing.T, path string, h http.Header) (*http.Response, string, bool) {
	t.Helper()
	before := e.local.calls.Load()
	req := e.newRequest(http.MethodGet, path, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp := e.do(req)
	return resp, readBody(t, resp), e.local.calls.Load() != before
}

func TestLegacyDiscoveryIsPeerAggregated(t *testing.T) {
	e, peer := legacyEnv(t)
	accept := func(v string) http.Header { return http.Header{"Accept": {v}} }

	t.Run("/apis lists every group in the aggregated order with its preferred version", func(t *testing.T) {
		resp, body, local := e.get(t, "/apis", accept("application/json"))
		if resp.StatusCode != http.StatusOK || local {
			t.Fatalf("%d local=%v %s", resp.StatusCode, local, body)
		}
		var list metav1.APIGroupList
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range list.Groups {
			names = append(names, g.Name+"="+g.PreferredVersion.GroupVersion)
		}
		want := "apps=apps/v1 certificates.k8s.io=certificates.k8s.io/v1 storagemigration.k8s.io=storagemigration.k8s.io/v1"
		if strings.Join(names, " ") != want || list.Kind != "APIGroupList" {
			t.Fatalf("groups %v (%s), want %s", names, list.Kind, want)
		}
		etag := resp.Header.Get("ETag")
		if etag == "" || etag[0] != '"' {
			t.Fatalf("ETag %q", etag)
		}
		nm, _, _ := e.get(t, "/apis", http.Header{"Accept": {"application/json"}, "If-None-Match": {etag}})
		if nm.StatusCode != http.StatusNotModified {
			t.Fatalf("If-None-Match: %d", nm.StatusCode)
		}
		pb, _, _ := e.get(t, "/apis", accept("application/vnd.kubernetes.protobuf"))
		if pb.StatusCode != http.StatusOK || pb.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
			t.Fatalf("protobuf: %d %s", pb.StatusCode, pb.Header.Get("Content-Type"))
		}
		// No Accept at all is the legacy form too (client-go's legacy path).
		if r, _, local := e.get(t, "/apis", nil); r.StatusCode != http.StatusOK || local || r.Header.Get("ETag") != etag {
			t.Fatalf("no Accept: %d local=%v", r.StatusCode, local)
		}
	})
	t.Run("/apis/<group>: merged for a group only peers serve, local otherwise", func(t *testing.T) {
		resp, body, local := e.get(t, "/apis/storagemigration.k8s.io", nil)
		var g metav1.APIGroup
		if resp.StatusCode != http.StatusOK || local || json.Unmarshal([]byte(body), &g) != nil || g.Name != "storagemigration.k8s.io" || g.PreferredVersion.Version != "v1" || g.Kind != "APIGroup" {
			t.Fatalf("%d local=%v %s", resp.StatusCode, local, body)
		}
		if _, _, local := e.get(t, "/apis/apps", nil); !local {
			t.Fatal("/apis/apps: this server serves every version, the chain answers")
		}
	})
	t.Run("/apis/<group>/<version>: a peer serving all of it answers, byte for byte", func(t *testing.T) {
		for _, path := range []string{"/apis/certificates.k8s.io/v1", "/apis/storagemigration.k8s.io/v1"} {
			n := len(peer.requests())
			resp, body, local := e.get(t, path, nil)
			if resp.StatusCode != http.StatusOK || local || len(peer.requests()) != n+1 {
				t.Fatalf("%s: %d local=%v %s", path, resp.StatusCode, local, body)
			}
			seen := peer.requests()[n]
			if seen.Path != path || seen.User == nil || seen.User.GetName() != "alice" {
				t.Fatalf("%s: the peer saw %s as %v (%v)", path, seen.Path, seen.User, seen.AuthErr)
			}
			if path == "/apis/certificates.k8s.io/v1" && body != peerCertsList {
				t.Fatalf("body %s, want the peer's", body)
			}
		}
		for _, path := range []string{"/apis/apps/v1", "/api/v1"} {
			if _, _, local := e.get(t, path, nil); !local {
				t.Fatalf("%s: served here in full, the chain answers", path)
			}
		}
	})
	t.Run("a group-version only a departed server served: 503 without Retry-After", func(t *testing.T) {
		for _, path := range []string{"/apis/departed.example.com/v1", "/apis/departed.example.com", "/openapi/v3/apis/departed.example.com/v1"} {
			resp, body, local := e.get(t, path, nil)
			if resp.StatusCode != http.StatusServiceUnavailable || local || resp.Header.Get("Retry-After") != "" || !strings.Contains(body, "departed.example.com/v1") {
				t.Fatalf("%s: %d local=%v Retry-After=%q %s", path, resp.StatusCode, local, resp.Header.Get("Retry-After"), body)
			}
			if got := resp.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-cache, private" {
				t.Errorf("%s: Cache-Control %q on this server's own answer", path, got)
			}
		}
		if r, _, local := e.get(t, "/apis/nowhere.example.com/v1", nil); !local || r.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown group-version: %d local=%v", r.StatusCode, local)
		}
	})
	t.Run("X-Kubernetes-Peer-Proxied asks for this server's own view", func(t *testing.T) {
		for _, path := range []string{"/apis", "/apis/storagemigration.k8s.io", "/apis/certificates.k8s.io/v1", "/openapi/v3", "/openapi/v3/apis/certificates.k8s.io/v1"} {
			if _, _, local := e.get(t, path, http.Header{PeerProxiedHeader: {"true"}}); !local {
				t.Fatalf("%s: not the chain's answer", path)
			}
		}
	})
	t.Run("/openapi/v3 names the peer's documents for what the peer serves more of", func(t *testing.T) {
		resp, body, _ := e.get(t, "/openapi/v3", nil)
		var doc struct {
			Paths map[string]struct {
				ServerRelativeURL string `json:"serverRelativeURL"`
			} `json:"paths"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		want := map[string]string{
			"api/v1":                          "/openapi/v3/api/v1?hash=LOCALCORE",
			"apis/apps/v1":                    "/openapi/v3/apis/apps/v1?hash=LOCALAPPS",
			"apis/certificates.k8s.io/v1":     "/openapi/v3/apis/certificates.k8s.io/v1?hash=PEERCERTS",
			"apis/storagemigration.k8s.io/v1": "/openapi/v3/apis/storagemigration.k8s.io/v1?hash=PEERSVM",
		}
		if len(doc.Paths) != len(want) {
			t.Fatalf("paths %v", doc.Paths)
		}
		for k, v := range want {
			if doc.Paths[k].ServerRelativeURL != v {
				t.Errorf("%s: %q, want %q", k, doc.Paths[k].ServerRelativeURL, v)
			}
		}
		etag := resp.Header.Get("Etag")
		if etag == "" {
			t.Fatal("no ETag")
		}
		// The peer's root is reused: a second read does not ask it again.
		n := len(peer.requests())
		if nm, _, _ := e.get(t, "/openapi/v3", http.Header{"If-None-Match": {etag}}); nm.StatusCode != http.StatusNotModified {
			t.Fatalf("If-None-Match: %d", nm.StatusCode)
		}
		if len(peer.requests()) != n {
			t.Errorf("the peer's root was read again within its TTL")
		}
	})
	t.Run("/openapi/v3/apis/<group>/<version> goes to the peer the root names", func(t *testing.T) {
		resp, body, local := e.get(t, "/openapi/v3/apis/certificates.k8s.io/v1?hash=PEERCERTS", nil)
		if resp.StatusCode != http.StatusOK || local || !strings.Contains(body, "peer /openapi/v3/apis/certificates.k8s.io/v1") {
			t.Fatalf("%d local=%v %s", resp.StatusCode, local, body)
		}
		// The peer's Cache-Control alone: the chain's default must not go
		// out beside it (clients would not cache the document by hash).
		if got := resp.Header.Values("Cache-Control"); len(got) != 1 || got[0] != "public, immutable" {
			t.Errorf("Cache-Control %q, want the peer's alone", got)
		}
		// A stale hash: the peer's redirect to its current one stays on
		// this server.
		noFollow := *e.client
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		req := e.newRequest(http.MethodGet, "/openapi/v3/apis/certificates.k8s.io/v1?hash=OLD", nil)
		r, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readBody(t, r)
		if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/openapi/v3/apis/certificates.k8s.io/v1?hash=PEERCERTS" {
			t.Fatalf("stale hash: %d %q", r.StatusCode, r.Header.Get("Location"))
		}
		// A redirect elsewhere is still refused.
		if r, _, _ := e.get(t, "/openapi/v3/apis/storagemigration.k8s.io/v1?hash=offsite", nil); r.StatusCode != http.StatusBadGateway {
			t.Fatalf("offsite redirect: %d", r.StatusCode)
		}
		if _, _, local := e.get(t, "/openapi/v3/apis/apps/v1", nil); !local {
			t.Fatal("apps/v1 OpenAPI: the chain answers")
		}
	})
	t.Run("metrics say who answered", func(t *testing.T) {
		for _, l := range []map[string]string{
			{"endpoint": "group_list", "source": "merged"},
			{"endpoint": "resource_list", "source": "peer"},
			{"endpoint": "resource_list", "source": "local"},
			{"endpoint": "resource_list", "source": "unavailable"},
			{"endpoint": "openapi_v3", "source": "merged"},
			{"endpoint": "openapi_v3_group_version", "source": "peer"},
		} {
			if counterValue(t, "peerdiscovery_filter_discovery_requests_total", l) == 0 {
				t.Errorf("no discovery request counted as %v", l)
			}
		}
	})
}

func TestLegacyResourceListWhenNoServerServesAllOfIt(t *testing.T) {
	e, peer := legacyEnv(t)
	other := e.newPeer(peerDiscoveryAnswers)
	pcrGVR := schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "podcertificaterequests"}
	// p1 serves CSRs and ClusterTrustBundles, p2 CSRs and
	// PodCertificateRequests: nobody serves all three.
	e.setRoutes(
		route(csrGVR, readyPeer(selfID, "self:1"), readyPeer("p1", peer.endpoint()), readyPeer("p2", other.endpoint())),
		route(ctbGVR, readyPeer("p1", peer.endpoint())),
		route(pcrGVR, readyPeer("p2", other.endpoint())),
	)
	e.f.views.Routes.SetMerged(mergedDiscovery(t, "2",
		[]apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods")},
		[]apidiscoveryv2.APIGroupDiscovery{func() apidiscoveryv2.APIGroupDiscovery {
			g := dgroup("certificates.k8s.io", "v1", "certificatesigningrequests", "clustertrustbundles", "podcertificaterequests")
			g.Versions[0].Resources[0].ResponseKind = &metav1.GroupVersionKind{Group: "certificates.k8s.io", Version: "v1", Kind: "CertificateSigningRequest"}
			g.Versions[0].Resources[0].Subresources = []apidiscoveryv2.APISubresourceDiscovery{{
				Subresource: "status", Verbs: []string{"get"},
				ResponseKind: &metav1.GroupVersionKind{Group: "certificates.k8s.io", Version: "v1", Kind: "CertificateSigningRequest"},
			}}
			return g
		}()}))
	resp, body, local := e.get(t, "/apis/certificates.k8s.io/v1", nil)
	var list metav1.APIResourceList
	if resp.StatusCode != http.StatusOK || local || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("%d local=%v %s", resp.StatusCode, local, body)
	}
	var names []string
	for _, r := range list.APIResources {
		names = append(names, r.Name)
		if r.Group != "" || r.Version != "" {
			t.Errorf("%s names group/version %s/%s: the legacy form leaves them out for its own group-version", r.Name, r.Group, r.Version)
		}
		if strings.Contains(r.Name, "/") && r.SingularName != "" {
			t.Errorf("subresource %s has singular name %q", r.Name, r.SingularName)
		}
	}
	if got := strings.Join(names, " "); got != "certificatesigningrequests certificatesigningrequests/status clustertrustbundles podcertificaterequests" || list.GroupVersion != "certificates.k8s.io/v1" {
		t.Fatalf("resources %s of %s", got, list.GroupVersion)
	}
	if resp.Header.Get("ETag") == "" {
		t.Error("no ETag on the merged list")
	}
	// OpenAPI has no merged form: the document of a peer serving two of
	// the three resources beats this server's, which has one.
	if _, _, local := e.get(t, "/openapi/v3/apis/certificates.k8s.io/v1", nil); local {
		t.Error("a split group-version's OpenAPI: a peer serving more of it answers")
	}
	if etag := resp.Header.Get("ETag"); etag != "" {
		if r, _, _ := e.get(t, "/apis/certificates.k8s.io/v1", http.Header{"If-None-Match": {etag}}); r.StatusCode != http.StatusNotModified {
			t.Errorf("If-None-Match: %d", r.StatusCode)
		}
	}
}
