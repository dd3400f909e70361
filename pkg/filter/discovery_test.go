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
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/client-go/discovery"

	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

const (
	acceptV2Beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
)

// setLocalDiscovery replaces this server's own documents.
func (e *env) setLocalDiscovery(api, apis []apidiscoveryv2.APIGroupDiscovery) {
	e.f.views.Local.SetDoc(views.NewLocalDoc(e.f.views.Local.Current(), api, apis, "", ""))
}

type discoveryResponse struct {
	code  int
	etag  string
	ctype string
	local bool
	items []apidiscoveryv2.APIGroupDiscovery
	raw   string
}

func (e *env) getDiscovery(t *testing.T, path, accept, ifNoneMatch string) discoveryResponse {
	t.Helper()
	h := http.Header{}
	if accept != "" {
		h.Set("Accept", accept)
	}
	if ifNoneMatch != "" {
		h.Set("If-None-Match", ifNoneMatch)
	}
	return e.getDiscoveryHeader(t, path, h)
}

// getDiscoveryHeader GETs path with header h; an aggregated answer is
// decoded into items.
func (e *env) getDiscoveryHeader(t *testing.T, path string, h http.Header) discoveryResponse {
	t.Helper()
	before := e.local.calls.Load()
	req := e.newRequest(http.MethodGet, path, nil)
	req.Header = h
	resp := e.do(req)
	body := readBody(t, resp)
	out := discoveryResponse{
		code: resp.StatusCode, etag: resp.Header.Get("ETag"), ctype: resp.Header.Get("Content-Type"),
		local: e.local.calls.Load() != before, raw: body,
	}
	if resp.StatusCode == http.StatusOK && !out.local && strings.Contains(out.ctype, "as=APIGroupDiscoveryList") {
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatalf("%s: %v: %s", path, err, body)
		}
		if list.Kind != "APIGroupDiscoveryList" || list.APIVersion != "apidiscovery.k8s.io/v2" {
			t.Fatalf("%s: served %s %s", path, list.APIVersion, list.Kind)
		}
		out.items = list.Items
	}
	return out
}

func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

func groupNames(groups []apidiscoveryv2.APIGroupDiscovery) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g.Name)
	}
	return out
}

func TestPeerAggregatedDiscovery(t *testing.T) {
	e := newEnv(t)
	mergedAPI := []apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods", "configmaps")}
	mergedAPIs := []apidiscoveryv2.APIGroupDiscovery{
		dgroup("apps", "v1", "deployments"),
		dgroup("example.com", "v1", "widgets"),
		dgroup("peer.example.com", "v1", "things"), // served by a peer only
	}
	merged := mergedDiscovery(t, "7", mergedAPI, mergedAPIs)
	e.f.views.Routes.SetMerged(merged)
	localAPI := []apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods")}
	e.setLocalDiscovery(localAPI, []apidiscoveryv2.APIGroupDiscovery{dgroup("apps", "v1", "deployments"), dgroup("example.com", "v1", "widgets")})

	t.Run("steady state: the merged document as is", func(t *testing.T) {
		r := e.getDiscovery(t, "/apis", discovery.AcceptV2, "")
		if r.code != http.StatusOK || r.local {
			t.Fatalf("%d, local %v: %s", r.code, r.local, r.raw)
		}
		if !strings.HasPrefix(r.ctype, discovery.AcceptV2) {
			t.Errorf("Content-Type %q", r.ctype)
		}
		if r.etag != strconv.Quote(merged.Status.APIs.ETag) {
			t.Errorf("ETag %s, want the merged document's, quoted: %q", r.etag, merged.Status.APIs.ETag)
		}
		if !sameJSON(t, r.items, mergedAPIs) {
			t.Errorf("served %s, want the merged document", r.raw)
		}
		// Every server answers the same bytes: the ETag is the document's.
		if tag, err := merge.ETag(r.items); err != nil || strconv.Quote(tag) != r.etag {
			t.Errorf("ETag %s is not the hash of the served items (%s, %v)", r.etag, tag, err)
		}
	})
	t.Run("If-None-Match: 304", func(t *testing.T) {
		r := e.getDiscovery(t, "/apis", discovery.AcceptV2, strconv.Quote(merged.Status.APIs.ETag))
		if r.code != http.StatusNotModified || r.raw != "" || r.local {
			t.Fatalf("%d local %v %q", r.code, r.local, r.raw)
		}
		r = e.getDiscovery(t, "/apis", discovery.AcceptV2, `"stale"`)
		if r.code != http.StatusOK || len(r.items) != 3 {
			t.Fatalf("stale If-None-Match: %d, %d groups", r.code, len(r.items))
		}
	})
	t.Run("core /api", func(t *testing.T) {
		r := e.getDiscovery(t, "/api", discovery.AcceptV2, "")
		if r.code != http.StatusOK || r.local || r.etag != strconv.Quote(merged.Status.API.ETag) || !sameJSON(t, r.items, mergedAPI) {
			t.Fatalf("%d local %v etag %s: %s", r.code, r.local, r.etag, r.raw)
		}
	})
	for _, tc := range []struct{ name, path, accept string }{
		{"profile=nopeer: this server's own view", "/apis", discovery.AcceptV2 + ";profile=nopeer"},
		{"profile=nopeer on /api", "/api", discovery.AcceptV2 + ";profile=nopeer"},
		{"legacy /api (APIVersions: v1 on every server)", "/api", "application/json"},
		{"this server's own view asked for", "/apis", ""},
		{"v2beta1", "/apis", acceptV2Beta1},
		{"group discovery", "/apis/apps", discovery.AcceptV2},
		{"not discovery", "/version", discovery.AcceptV2},
	} {
		t.Run(tc.name+": passed to the chain", func(t *testing.T) {
			if tc.name == "this server's own view asked for" {
				if r := e.getDiscoveryHeader(t, tc.path, http.Header{PeerProxiedHeader: {"true"}}); !r.local {
					t.Fatalf("served by the filter: %d %s", r.code, r.raw)
				}
				return
			}
			if r := e.getDiscovery(t, tc.path, tc.accept, ""); !r.local {
				t.Fatalf("served by the filter: %d %s", r.code, r.raw)
			}
		})
	}
	t.Run("not GET: passed to the chain", func(t *testing.T) {
		req := e.newRequest(http.MethodPost, "/apis", strings.NewReader("{}"))
		req.Header.Set("Accept", discovery.AcceptV2)
		before := e.local.calls.Load()
		readBody(t, e.do(req))
		if e.local.calls.Load() == before {
			t.Fatal("POST /apis served by the filter")
		}
	})

	t.Run("a local-only group is in the combined document", func(t *testing.T) {
		// A CRD created here shows at once, before peerdiscovery-apiserver
		// has merged it.
		e.setLocalDiscovery(localAPI, []apidiscoveryv2.APIGroupDiscovery{
			dgroup("apps", "v1", "deployments"),
			dgroup("example.com", "v1", "widgets", "gizmos"),
			dgroup("local.example.com", "v1", "newthings"),
		})
		r := e.getDiscovery(t, "/apis", discovery.AcceptV2, "")
		if r.code != http.StatusOK || r.local {
			t.Fatalf("%d local %v", r.code, r.local)
		}
		names := groupNames(r.items)
		for _, want := range []string{"apps", "example.com", "peer.example.com", "local.example.com"} {
			if !contains1(names, want) {
				t.Fatalf("groups %v lack %s", names, want)
			}
		}
		var resources []string
		for _, g := range r.items {
			if g.Name == "example.com" {
				for _, res := range g.Versions[0].Resources {
					resources = append(resources, res.Resource)
				}
			}
		}
		if !contains1(resources, "gizmos") || !contains1(resources, "widgets") {
			t.Fatalf("example.com/v1 resources %v", resources)
		}
		if r.etag == strconv.Quote(merged.Status.APIs.ETag) || r.etag == "" || r.etag[0] != '"' {
			t.Fatalf("ETag %s must be the combined document's", r.etag)
		}
		if tag, err := merge.ETag(r.items); err != nil || strconv.Quote(tag) != r.etag {
			t.Errorf("ETag %s is not the hash of the served items (%s, %v)", r.etag, tag, err)
		}
		// Deterministic, and cached by ETag.
		if again := e.getDiscovery(t, "/apis", discovery.AcceptV2, ""); again.etag != r.etag || again.raw != r.raw {
			t.Fatal("the combined document changed between two requests")
		}
		if nm := e.getDiscovery(t, "/apis", discovery.AcceptV2, r.etag); nm.code != http.StatusNotModified {
			t.Fatalf("If-None-Match with the combined ETag: %d", nm.code)
		}
		// /api is unaffected.
		if api := e.getDiscovery(t, "/api", discovery.AcceptV2, ""); api.etag != strconv.Quote(merged.Status.API.ETag) {
			t.Fatalf("/api ETag %s", api.etag)
		}
	})
	t.Run("a new merged document replaces the old one", func(t *testing.T) {
		e.setLocalDiscovery(localAPI, []apidiscoveryv2.APIGroupDiscovery{dgroup("apps", "v1", "deployments")})
		next := mergedDiscovery(t, "8", mergedAPI, []apidiscoveryv2.APIGroupDiscovery{dgroup("apps", "v1", "deployments"), dgroup("new.example.com", "v1", "news")})
		e.f.views.Routes.SetMerged(next)
		r := e.getDiscovery(t, "/apis", discovery.AcceptV2, strconv.Quote(merged.Status.APIs.ETag))
		if r.code != http.StatusOK || r.etag != strconv.Quote(next.Status.APIs.ETag) || !reflect.DeepEqual(groupNames(r.items), []string{"apps", "new.example.com"}) {
			t.Fatalf("%d %s %v", r.code, r.etag, groupNames(r.items))
		}
	})
	t.Run("caches not synced, past the start window: passed to the chain", func(t *testing.T) {
		e.f.views.Routes.SetSynced(false)
		defer e.f.views.Routes.SetSynced(true)
		e.f.started.Store(true)
		defer e.f.started.Store(false)
		// The post-start hook ran unsyncedReadyAfter ago: the server is
		// ready, as stock when no peerdiscovery-apiserver is reachable.
		e.f.setSyncDeadline(timePtr(time.Now().Add(e.f.opts.SyncGracePeriod - unsyncedReadyAfter - time.Second)))
		defer e.f.setSyncDeadline(nil)
		if r := e.getDiscovery(t, "/apis", discovery.AcceptV2, ""); !r.local {
			t.Fatal("served by the filter while not synced")
		}
	})
	// A starting server's own documents lack its peers' groups and, for a
	// moment, its CRDs; the namespace controller deleted a namespace's
	// built-in objects from such a document and left its custom resources
	// behind (test/upgradedrill, a cold CI run). Until synced, within the
	// start window, every discovery document is a 503.
	t.Run("caches not synced, in the start window: 503", func(t *testing.T) {
		e.f.views.Routes.SetSynced(false)
		defer e.f.views.Routes.SetSynced(true)
		for _, started := range []bool{false, true} {
			e.f.started.Store(started)
			if started {
				// The post-start hook ran a moment ago.
				e.f.setSyncDeadline(timePtr(time.Now().Add(e.f.opts.SyncGracePeriod - time.Second)))
			}
			for _, c := range []struct{ path, accept string }{
				{"/apis", discovery.AcceptV2},
				{"/api", discovery.AcceptV2},
				{"/apis", "application/json"},
				{"/apis/apps", "application/json"},
				{"/apis/apps/v1", "application/json"},
				{"/api/v1", "application/json"},
			} {
				r := e.getDiscovery(t, c.path, c.accept, "")
				if r.local || r.code != http.StatusServiceUnavailable || !strings.Contains(r.raw, "discovery is not synced yet") {
					t.Errorf("hook run %v: GET %s (%s) = %d, local chain %v: %s; want 503 from the filter", started, c.path, c.accept, r.code, r.local, r.raw)
				}
			}
			// Its own view, and a peer's proxied request, stay the chain's.
			if r := e.getDiscovery(t, "/apis", discovery.AcceptV2+";profile=nopeer", ""); !r.local {
				t.Errorf("hook run %v: profile=nopeer answered %d by the filter", started, r.code)
			}
			if r := e.getDiscoveryHeader(t, "/apis", http.Header{PeerProxiedHeader: {"true"}, "Accept": {discovery.AcceptV2}}); !r.local {
				t.Errorf("hook run %v: a peer-proxied request answered %d by the filter", started, r.code)
			}
			// Not a discovery document: the chain's.
			if r := e.getDiscovery(t, "/version", "application/json", ""); !r.local {
				t.Errorf("hook run %v: /version answered %d by the filter", started, r.code)
			}
		}
		e.f.started.Store(false)
		e.f.setSyncDeadline(nil)
	})
	t.Run("no merged document yet: passed to the chain", func(t *testing.T) {
		e.f.views.Routes.SetMerged(nil)
		if r := e.getDiscovery(t, "/apis", discovery.AcceptV2, ""); !r.local {
			t.Fatal("served by the filter without a merged document")
		}
	})
}

func contains1(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
