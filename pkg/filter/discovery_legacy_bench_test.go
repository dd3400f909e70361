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
	"fmt"
	"net/http"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/discovery"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Benchmarks of the legacy discovery paths beside upstream's own legacy
// discovery handlers (k8s.io/apiserver/pkg/endpoints/discovery), which are
// what a kube-apiserver runs for a group-version it serves itself, in the
// same run. Upstream's peer proxy has no legacy discovery path to compare:
// it passes these requests to the local chain.

// legacyBenchGroups is a cluster-sized view: 40 groups of 2 resources.
const legacyBenchGroups = 40

func legacyBenchResources(g int) []metav1.APIResource {
	return []metav1.APIResource{
		{Name: fmt.Sprintf("things%d", g), SingularName: fmt.Sprintf("thing%d", g), Namespaced: true, Kind: fmt.Sprintf("Thing%d", g), Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}, StorageVersionHash: "abcdefgh"},
		{Name: fmt.Sprintf("things%d/status", g), Namespaced: true, Kind: fmt.Sprintf("Thing%d", g), Verbs: []string{"get", "patch", "update"}},
		{Name: fmt.Sprintf("gadgets%d", g), SingularName: fmt.Sprintf("gadget%d", g), Kind: fmt.Sprintf("Gadget%d", g), Verbs: []string{"get", "list", "watch"}, StorageVersionHash: "ijklmnop"},
	}
}

func legacyBenchGV(g int) schema.GroupVersion {
	return schema.GroupVersion{Group: fmt.Sprintf("group%d.example.com", g), Version: "v1"}
}

// legacyBench is this server with the filter (serving the even groups),
// a peer serving every group through upstream's own handlers, and
// upstream's handlers for this server's own answers.
type legacyBench struct {
	ours                 http.Handler
	upstreamAPIs         http.Handler
	upstreamVersion      http.Handler
	peerGV, localGV      schema.GroupVersion
	peerPath, localPath  string
	upstreamVersionCalls int
}

func newLegacyBench(b testing.TB) *legacyBench {
	b.Helper()
	pki := newTestPKI(b)
	root := discovery.NewRootAPIsHandler(discovery.DefaultAddresses{DefaultAddress: "127.0.0.1:6443"}, testSerializer)
	mux := http.NewServeMux()
	var merged []apidiscoveryv2.APIGroupDiscovery
	var localDocs []apidiscoveryv2.APIGroupDiscovery
	lb := &legacyBench{peerGV: legacyBenchGV(1), localGV: legacyBenchGV(0)}
	for g := 0; g < legacyBenchGroups; g++ {
		gv := legacyBenchGV(g)
		res := legacyBenchResources(g)
		h := discovery.NewAPIVersionHandler(testSerializer, gv, discovery.APIResourceListerFunc(func() []metav1.APIResource { return res }))
		mux.Handle("/apis/"+gv.Group+"/"+gv.Version, h)
		if g == 0 {
			lb.upstreamVersion = h
		}
		ver := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		root.AddGroup(metav1.APIGroup{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{ver}, PreferredVersion: ver})
		d := dgroup(gv.Group, gv.Version, res[0].Name, res[2].Name)
		merged = append(merged, d)
		if g%2 == 0 {
			localDocs = append(localDocs, d)
		}
	}
	lb.upstreamAPIs = root
	lb.peerPath = "/apis/" + lb.peerGV.Group + "/" + lb.peerGV.Version
	lb.localPath = "/apis/" + lb.localGV.Group + "/" + lb.localGV.Version

	ep := startBenchPeer(b, pki, mux).Listener.Addr().String()
	f := newBenchFilter(b, pki)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lb.upstreamVersionCalls++
		lb.upstreamVersion.ServeHTTP(w, r)
	})
	lb.ours = f.WrapHandler(next, &genericapiserver.Config{APIServerID: selfID, Serializer: testSerializer})
	f.views.Local.SetDoc(views.NewLocalDoc(nil, []apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods")}, localDocs, "", ""))
	var tables []*v1alpha1.PeerRoutingTable
	for g, d := range merged {
		for _, r := range d.Versions[0].Resources {
			gvr := legacyBenchGV(g).WithResource(r.Resource)
			if g%2 == 0 {
				tables = append(tables, route(gvr, readyPeer(selfID, "127.0.0.1:6443"), readyPeer(benchPeerID, ep)))
			} else {
				tables = append(tables, route(gvr, readyPeer(benchPeerID, ep)))
			}
		}
	}
	f.views.Routes.SetTable(routing.NewTable(tables, apiServerPeers(tables)))
	f.views.Routes.SetMerged(&v1alpha1.PeerAggregatedDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PeerAggregatedDiscoveryName, ResourceVersion: "1"},
		Status: v1alpha1.PeerAggregatedDiscoveryStatus{
			API:  v1alpha1.DiscoveryDocument{Items: []apidiscoveryv2.APIGroupDiscovery{dgroup("", "v1", "pods")}},
			APIs: v1alpha1.DiscoveryDocument{Items: merged},
		},
	})
	f.views.Routes.SetSynced(true)
	return lb
}

// BenchmarkLegacyDiscovery: the merged legacy /apis beside upstream's
// root handler serving the same groups from memory, and a resource list
// proxied to the peer beside upstream's handler answering it locally.
func BenchmarkLegacyDiscovery(b *testing.B) {
	quietKlog()
	lb := newLegacyBench(b)
	for _, c := range []struct {
		name, path string
		h          http.Handler
	}{
		{"apis/merged", "/apis", lb.ours},
		{"apis/upstream-local", "/apis", lb.upstreamAPIs},
		{"group-version/proxied", lb.peerPath, lb.ours},
		{"group-version/upstream-local", lb.localPath, lb.upstreamVersion},
	} {
		b.Run(c.name, func(b *testing.B) {
			req := benchRequest(b, c.path)
			req.Header.Set("Accept", "application/json")
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				c.h.ServeHTTP(w, req)
				if w.code != http.StatusOK && w.code != 0 {
					b.Fatalf("%s: status %d", c.path, w.code)
				}
			}
		})
	}
}

// TestLegacyBenchPremises checks on every test run that the benchmark
// measures what it says: /apis merged by the filter, the peer's
// group-version proxied, the local one passed to the chain.
func TestLegacyBenchPremises(t *testing.T) {
	lb := newLegacyBench(t)
	w := &benchWriter{h: http.Header{}}
	lb.ours.ServeHTTP(w, benchRequest(t, "/apis"))
	if w.h.Get("ETag") == "" || lb.upstreamVersionCalls != 0 {
		t.Fatalf("/apis not merged by the filter: %v, %d chain calls", w.h, lb.upstreamVersionCalls)
	}
	w.reset()
	lb.ours.ServeHTTP(w, benchRequest(t, lb.peerPath))
	if w.code != http.StatusOK || lb.upstreamVersionCalls != 0 {
		t.Fatalf("peer group-version: %d, %d chain calls", w.code, lb.upstreamVersionCalls)
	}
	w.reset()
	lb.ours.ServeHTTP(w, benchRequest(t, lb.localPath))
	if lb.upstreamVersionCalls != 1 {
		t.Fatalf("local group-version not passed to the chain: %d", lb.upstreamVersionCalls)
	}
}
