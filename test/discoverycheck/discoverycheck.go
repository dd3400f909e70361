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

// Package discoverycheck checks, on a real control plane, that a server with
// the filter answers the legacy discovery endpoints and OpenAPI v3 for the
// whole cluster: what the end-to-end suites of every release mix share.
package discoverycheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/discoveryclient"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// localView asks any server with the filter for its own answer.
const localView = "X-Kubernetes-Peer-Proxied"

// aggregated reads /api and /apis in the aggregated form (nopeer: the
// server's own view).
func aggregated(t testing.TB, cfg *rest.Config, nopeer bool) []apidiscoveryv2.APIGroupDiscovery {
	t.Helper()
	var out []apidiscoveryv2.APIGroupDiscovery
	for _, path := range []string{"/api", "/apis"} {
		groups, _, _ := planetest.Aggregated(t, cfg, path, nopeer)
		out = append(out, groups...)
	}
	return out
}

type gvSet map[schema.GroupVersion]map[string]bool

func resourcesByGV(groups []apidiscoveryv2.APIGroupDiscovery) gvSet {
	out := gvSet{}
	for _, g := range groups {
		for _, v := range g.Versions {
			gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
			out[gv] = map[string]bool{}
			for _, r := range v.Resources {
				out[gv][r.Resource] = true
			}
		}
	}
	return out
}

func covers(have, want map[string]bool) bool {
	for r := range want {
		if !have[r] {
			return false
		}
	}
	return true
}

func listPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

func openAPIKey(gv schema.GroupVersion) string { return strings.TrimPrefix(listPath(gv), "/") }

// Result is what LegacyAndOpenAPI saw, for the test log.
type Result struct {
	GroupVersions, FromPeers, Split int
	OpenAPIFromPeers                int
}

// LegacyAndOpenAPI checks the legacy discovery and OpenAPI v3 of server
// through of c against the merged aggregated view it serves, comparing with
// every server of c:
//   - GET /apis/<group>/<version> (and /api/v1) answers 200 for every
//     group-version of the merged view, byte for byte what a server serving
//     all of it answers itself (or, when none does, with exactly the merged
//     resources);
//   - the legacy /apis lists every group and version, in the merged order,
//     with the merged preferred version;
//   - client-go's discovery forced to the legacy form, and
//     pkg/discoveryclient's WithLegacy, find the merged GVRs;
//   - /openapi/v3 lists every group-version; where through serves none of
//     a group-version, its entry is a capable server's own (same hash), and
//     that document is served through through.
func LegacyAndOpenAPI(t *testing.T, c *localcluster.Cluster, through int) Result {
	t.Helper()
	var servers []*rest.Config
	for i := range c.Servers() {
		servers = append(servers, c.AdminConfig(i))
	}
	var res Result
	cfg := servers[through]
	merged := aggregated(t, cfg, false)
	want := resourcesByGV(merged)
	own := make([]gvSet, len(servers))
	for i, c := range servers {
		own[i] = resourcesByGV(aggregated(t, c, true))
	}

	gvs := make([]schema.GroupVersion, 0, len(want))
	for gv := range want {
		gvs = append(gvs, gv)
	}
	sort.Slice(gvs, func(i, j int) bool { return gvs[i].String() < gvs[j].String() })
	for _, gv := range gvs {
		res.GroupVersions++
		path := listPath(gv)
		code, _, body := planetest.Get(t, cfg, path, "Accept", "application/json")
		if code != http.StatusOK {
			t.Errorf("GET %s through server %d: %d %s", path, through, code, body)
			continue
		}
		var capable []int
		for i := range servers {
			if covers(own[i][gv], want[gv]) {
				capable = append(capable, i)
			}
		}
		if !covers(own[through][gv], want[gv]) {
			res.FromPeers++
		}
		if len(capable) == 0 {
			res.Split++
			var list metav1.APIResourceList
			if err := json.Unmarshal(body, &list); err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			got := map[string]bool{}
			for _, r := range list.APIResources {
				if !strings.Contains(r.Name, "/") {
					got[r.Name] = true
				}
			}
			if !covers(got, want[gv]) || !covers(want[gv], got) {
				t.Errorf("%s through server %d lists %v, the merged view %v", path, through, got, want[gv])
			}
			continue
		}
		same := false
		for _, i := range capable {
			_, _, direct := planetest.Get(t, servers[i], path, "Accept", "application/json", localView, "true")
			if bytes.Equal(direct, body) {
				same = true
				break
			}
		}
		if !same {
			t.Errorf("%s through server %d is not byte for byte what a server serving it answers (capable: %v):\n%s", path, through, capable, body)
		}
	}

	// The legacy /apis: every group and version, merged order and
	// preferred version.
	code, _, body := planetest.Get(t, cfg, "/apis", "Accept", "application/json")
	var groups metav1.APIGroupList
	if code != http.StatusOK || json.Unmarshal(body, &groups) != nil {
		t.Fatalf("legacy /apis through server %d: %d %s", through, code, body)
	}
	var gotOrder, wantOrder []string
	for _, g := range groups.Groups {
		var vs []string
		for _, v := range g.Versions {
			vs = append(vs, v.Version)
		}
		gotOrder = append(gotOrder, fmt.Sprintf("%s[%s]%s", g.Name, strings.Join(vs, ","), g.PreferredVersion.Version))
	}
	for _, g := range merged {
		if g.Name == "" {
			continue
		}
		var vs []string
		for _, v := range g.Versions {
			vs = append(vs, v.Version)
		}
		wantOrder = append(wantOrder, fmt.Sprintf("%s[%s]%s", g.Name, strings.Join(vs, ","), vs[0]))
	}
	if strings.Join(gotOrder, " ") != strings.Join(wantOrder, " ") {
		t.Errorf("legacy /apis through server %d:\n got %v\nwant %v", through, gotOrder, wantOrder)
	}

	// Real clients of the legacy form.
	legacy, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	legacy.UseLegacyDiscovery = true
	checkClient(t, "client-go legacy discovery", legacy, want)
	pdc, err := discoveryclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkClient(t, "discoveryclient.WithLegacy", pdc.WithLegacy(), want)

	res.OpenAPIFromPeers = checkOpenAPI(t, through, servers, gvs, own, want)
	return res
}

func checkClient(t *testing.T, name string, c discovery.DiscoveryInterface, want gvSet) {
	t.Helper()
	var lists []*metav1.APIResourceList
	var err error
	// A group-version whose server was just asked may fail once; the
	// client's contract is partial results with an error.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, lists, err = c.ServerGroupsAndResources()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Errorf("%s: %v", name, err)
	}
	got := gvSet{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		got[gv] = map[string]bool{}
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") {
				got[gv][r.Name] = true
			}
		}
	}
	if fmt.Sprint(flatten(got)) != fmt.Sprint(flatten(want)) {
		t.Errorf("%s finds %d GVRs, the merged aggregated view has %d:\n got %v\nwant %v", name, len(flatten(got)), len(flatten(want)), flatten(got), flatten(want))
	}
}

func flatten(s gvSet) []string {
	var out []string
	for gv, rs := range s {
		for r := range rs {
			out = append(out, gv.WithResource(r).String())
		}
	}
	sort.Strings(out)
	return out
}

type openAPIRoot struct {
	Paths map[string]struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	} `json:"paths"`
}

func readOpenAPIRoot(t *testing.T, cfg *rest.Config, headers ...string) openAPIRoot {
	t.Helper()
	code, _, body := planetest.Get(t, cfg, "/openapi/v3", headers...)
	var root openAPIRoot
	if code != http.StatusOK || json.Unmarshal(body, &root) != nil {
		t.Fatalf("/openapi/v3: %d %s", code, body)
	}
	return root
}

func checkOpenAPI(t *testing.T, through int, servers []*rest.Config, gvs []schema.GroupVersion, own []gvSet, want gvSet) int {
	t.Helper()
	root := readOpenAPIRoot(t, servers[through])
	fromPeers := 0
	for _, gv := range gvs {
		entry, ok := root.Paths[openAPIKey(gv)]
		if !ok {
			t.Errorf("/openapi/v3 through server %d has no %s", through, openAPIKey(gv))
			continue
		}
		if len(own[through][gv]) > 0 {
			continue
		}
		// A group-version through does not serve at all: the entry is a
		// capable server's own, and its document comes through.
		fromPeers++
		match := false
		for i := range servers {
			if i == through || !covers(own[i][gv], want[gv]) {
				continue
			}
			if readOpenAPIRoot(t, servers[i], localView, "true").Paths[openAPIKey(gv)].ServerRelativeURL == entry.ServerRelativeURL {
				match = true
			}
		}
		if !match {
			t.Errorf("/openapi/v3 through server %d names %s for %s: no server serving it has that hash", through, entry.ServerRelativeURL, gv)
		}
		code, h, body := planetest.Get(t, servers[through], entry.ServerRelativeURL, "Accept", "application/json")
		if code != http.StatusOK || !bytes.Contains(body, []byte(`"openapi"`)) {
			t.Errorf("GET %s through server %d: %d %.200s", entry.ServerRelativeURL, through, code, body)
		} else if !strings.Contains(h.Get("Cache-Control"), "immutable") {
			t.Errorf("GET %s through server %d: Cache-Control %q: the hash did not match", entry.ServerRelativeURL, through, h.Get("Cache-Control"))
		}
	}
	return fromPeers
}
