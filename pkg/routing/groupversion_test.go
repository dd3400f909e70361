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

package routing

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

func TestDecideGroupVersion(t *testing.T) {
	certs := schema.GroupVersion{Group: "certificates.k8s.io", Version: "v1"}
	csr := gvr("certificates.k8s.io", "v1", "certificatesigningrequests")
	ctb := gvr("certificates.k8s.io", "v1", "clustertrustbundles")
	svm := gvr("storagemigration.k8s.io", "v1", "storageversionmigrations")
	crd := gvr("example.com", "v1", "widgets")
	// a (this server, v1.36) serves CSRs; b and c (v1.37) serve both.
	localCSR := LocalFunc(func(g schema.GroupVersionResource) bool { return g == csr || g == crd })
	for _, tc := range []struct {
		name      string
		tables    []*v1alpha1.PeerRoutingTable
		gv        schema.GroupVersion
		local     Local
		want      v1alpha1.RouteDecision
		split     bool
		first     string
		wantCands int
		served    [2]int
	}{
		{
			name:   "this server serves all of it",
			tables: []*v1alpha1.PeerRoutingTable{rt(csr, withPeers(ready("a"), ready("b")))},
			gv:     certs, local: localCSR, want: v1alpha1.RouteLocal,
		},
		{
			name: "a peer serves more of a group-version this server serves in part",
			tables: []*v1alpha1.PeerRoutingTable{
				rt(csr, withPeers(ready("a"), ready("b"), ready("c"))),
				rt(ctb, withPeers(ready("b"), ready("c"))),
			},
			gv: certs, local: localCSR, want: v1alpha1.RouteProxy, wantCands: 2,
		},
		{
			name: "a peer that is not ready does not count",
			tables: []*v1alpha1.PeerRoutingTable{
				rt(csr, withPeers(ready("a"), notReady("b"), ready("c"))),
				rt(ctb, withPeers(notReady("b"), ready("c"))),
			},
			gv: certs, local: localCSR, want: v1alpha1.RouteProxy, first: "c", wantCands: 1,
		},
		{
			name: "resources served only by departed servers are not live",
			tables: []*v1alpha1.PeerRoutingTable{
				rt(csr, withPeers(ready("a"), left("b"))),
				rt(ctb, withPeers(left("b"))),
			},
			gv: certs, local: localCSR, want: v1alpha1.RouteLocal,
		},
		{
			name:   "a group-version only departed servers served is unavailable",
			tables: []*v1alpha1.PeerRoutingTable{rt(svm, withPeers(left("b"), notReady("c")))},
			gv:     svm.GroupVersion(), local: localCSR, want: v1alpha1.RouteUnavailable,
		},
		{
			name:   "no route: the local chain answers",
			tables: []*v1alpha1.PeerRoutingTable{rt(csr, withPeers(ready("a")))},
			gv:     svm.GroupVersion(), local: localCSR, want: v1alpha1.RouteNotFound,
		},
		{
			name:   "cluster-wide routes never send a group-version to a peer",
			tables: []*v1alpha1.PeerRoutingTable{rt(crd, clusterWide("crd"), withPeers(ready("b")))},
			gv:     crd.GroupVersion(), local: LocalFunc(func(schema.GroupVersionResource) bool { return false }), want: v1alpha1.RouteNotFound,
		},
		{
			name: "no single server serves all: split, the peer serving most first",
			tables: []*v1alpha1.PeerRoutingTable{
				rt(csr, withPeers(ready("a"), ready("c"))),
				rt(ctb, withPeers(ready("b"), ready("c"))),
				rt(gvr("certificates.k8s.io", "v1", "podcertificaterequests"), withPeers(ready("b"))),
			},
			gv: certs, local: localCSR, want: v1alpha1.RouteProxy, split: true, first: "b", wantCands: 2, served: [2]int{2, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := tc.local
			if local == nil {
				local = localSet{}
			}
			got := DecideGroupVersion(&Snapshot{Table: newTable(tc.tables...), Self: "a", Local: local}, tc.gv, testNow)
			if got.Decision != tc.want || got.Split != tc.split || len(got.Candidates) != tc.wantCands {
				t.Fatalf("got %s split=%v candidates=%v; want %s split=%v with %d candidates", got.Decision, got.Split, got.Candidates, tc.want, tc.split, tc.wantCands)
			}
			if tc.first != "" && got.Candidates[0].ID != tc.first {
				t.Errorf("first candidate %s, want %s", got.Candidates[0].ID, tc.first)
			}
			if tc.split && (got.PeerServes != tc.served[0] || got.LocalServes != tc.served[1]) {
				t.Errorf("served peer/local %d/%d, want %v", got.PeerServes, got.LocalServes, tc.served)
			}
			if !tc.split && tc.wantCands == 2 {
				// The same order as resource requests use.
				res := decide(newTable(tc.tables...), Request{IsResourceRequest: true, GVR: ctb}, "a", tc.local)
				if res.Candidates[0].ID != got.Candidates[0].ID {
					t.Errorf("group-version candidates start with %s, resource candidates with %s", got.Candidates[0].ID, res.Candidates[0].ID)
				}
			}
		})
	}
}

// TestDecideRoot: an unsynced server's own /api or /apis document is no
// answer while a live peer's Lease records a resource of it that the server
// lacks; otherwise the chain answers.
func TestDecideRoot(t *testing.T) {
	pdbs, pods := gvr("policy", "v1", "poddisruptionbudgets"), gvr("", "v1", "pods")
	zeta := gvr("zeta.example.com", "v1", "zetas")
	departed := record("b", testNow, pdbs)
	departed.Departed, departed.DepartedAt = true, testNow.Add(-time.Second)
	for _, tc := range []struct {
		name   string
		s      Snapshot
		legacy bool
		want   v1alpha1.RouteDecision
		by     string
		wantGV schema.GroupVersion
	}{
		{"a live peer records what this server lacks", Snapshot{Records: Records{"b": record("b", testNow, zeta, pdbs, pods)}}, false, v1alpha1.RouteUnavailable, "b", pdbs.GroupVersion()},
		{"the core group: the peer's core resources are served here", Snapshot{Records: Records{"b": record("b", testNow, pdbs, pods)}}, true, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
		{"the core group: a core resource this server lacks", Snapshot{Records: Records{"b": record("b", testNow, gvr("", "v1", "newthings"))}}, true, v1alpha1.RouteUnavailable, "b", schema.GroupVersion{Version: "v1"}},
		{"the first server by ID", Snapshot{Records: Records{"c": record("c", testNow, zeta), "b": record("b", testNow, pdbs)}}, false, v1alpha1.RouteUnavailable, "b", pdbs.GroupVersion()},
		{"only this server's own record", Snapshot{Records: Records{self: record(self, testNow, pdbs)}}, false, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
		{"a lapsed record", Snapshot{Records: Records{"b": record("b", testNow.Add(-time.Minute), pdbs)}}, false, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
		{"a departed server's record", Snapshot{Records: Records{"b": departed}}, false, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
		{"no records (no peerdiscovery yet)", Snapshot{}, false, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
		{"synced: the view's merged document", Snapshot{Table: newTable(), Records: Records{"b": record("b", testNow, pdbs)}}, false, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
		{"no peerdiscovery APIService: stock discovery", Snapshot{Records: Records{"b": record("b", testNow, pdbs)}}, false, v1alpha1.RouteLocal, "", schema.GroupVersion{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.Self, s.Local = self, localSet{pods: true}
			s.ViewRegistered = !strings.HasPrefix(tc.name, "no peerdiscovery APIService")
			got := DecideRoot(&s, tc.legacy, testNow)
			if got.Decision != tc.want || got.RecordedBy != tc.by || got.GroupVersion != tc.wantGV {
				t.Errorf("got %s by %q for %v; want %s by %q for %v", got.Decision, got.RecordedBy, got.GroupVersion, tc.want, tc.by, tc.wantGV)
			}
		})
	}
}
