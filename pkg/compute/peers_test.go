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

package compute

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

func TestComputeLeftPeer(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments"))), grp("only-a.example.com", ver("v1", res("things")))))
	b := readyPeer("b", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	left := t0.Add(time.Minute)
	a.Left, a.LeftTime, a.ReadyReason = true, left, "Left" // Ready left true on purpose: Left wins
	out, err := Compute(Input{Peers: []Peer{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	rt := routeByName(out, "things.v1.only-a.example.com")
	if rt == nil {
		t.Fatal("a left peer's route is gone before its tombstone expires")
	}
	if len(rt.Status.Peers) != 1 || !rt.Status.Peers[0].Left {
		t.Errorf("left peer in route: %+v", rt.Status.Peers)
	}
	if rt.Status.TotalPeers != 1 || rt.Status.ServedByAll {
		t.Errorf("route of a left peer: %+v", rt.Status)
	}
	if rt := routeByName(out, "deployments.v1.apps"); rt.Status.TotalPeers != 1 || !rt.Status.ServedByAll ||
		!slices.Equal(routePeerIDs(rt), []string{"a", "b"}) {
		t.Errorf("deployments: %+v", rt.Status)
	}
	// Listed while tombstoned, as stale: controllers that act on discovery
	// (namespace deletion, garbage collection) must see the GVR, whose
	// requests answer 503, until the tombstone expires.
	if !hasGV(out.Discovery.Status.APIs.Items, "only-a.example.com", "v1") {
		t.Error("a left peer's APIs left the merged discovery before its tombstone expired")
	}
	found := false
	for _, s := range out.Discovery.Status.Sources {
		if s.ServerID == "a" {
			found = true
			if !s.Stale {
				t.Error("a left peer is a fresh discovery source")
			}
		}
	}
	if !found {
		t.Error("a left peer is no discovery source while tombstoned")
	}
	p := peerByID(out, "a")
	if p.Status.LeftTime == nil || !p.Status.LeftTime.Time.Equal(left) {
		t.Errorf("leftTime = %v", p.Status.LeftTime)
	}
	if c := p.Status.Conditions[0]; c.Status != metav1.ConditionFalse || c.Reason != "Left" {
		t.Errorf("Ready condition of a left peer: %+v", c)
	}
}

// The last peer leaving keeps the merged discovery while its tombstone
// lasts; it empties when the peer is gone from the input (the tombstone
// expired).
func TestComputeLastPeerLeft(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	a.Left, a.LeftTime = true, t0
	out, err := Compute(Input{Peers: []Peer{a}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(out.Discovery.Status.API.Items) + len(out.Discovery.Status.APIs.Items); n == 0 {
		t.Error("merged discovery dropped a tombstoned peer's groups")
	}
	gone, err := Compute(Input{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(gone.Discovery.Status.API.Items) + len(gone.Discovery.Status.APIs.Items); n != 0 {
		t.Errorf("merged discovery keeps %d groups after the tombstone expired", n)
	}
	if len(out.Routes) != 4 {
		t.Errorf("tombstoned routes: %d, want 4", len(out.Routes))
	}
	for _, r := range out.Routes {
		if r.Status.TotalPeers != 0 || r.Status.ServedByAll {
			t.Errorf("%s: %+v", r.Name, r.Status)
		}
	}
}

func TestComputePeerWithoutDocument(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	pending := Peer{
		ServerID: "b", Endpoint: "10.0.0.2:6443", ReadyReason: "Pending", ReadyMessage: "discovery not read yet", ReadyTransition: t0,
		// Documents without HasDocument are ignored.
		API: coreDoc, APIs: docs(grp("ghost.example.com", ver("v1", res("ghosts")))),
	}
	out, err := Compute(Input{Peers: []Peer{pending, a}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Routes {
		if slices.Contains(routePeerIDs(&r), "b") {
			t.Errorf("%s lists a peer with no document", r.Name)
		}
		// b is present but serves nothing known: nothing is served by all.
		if r.Status.TotalPeers != 2 || r.Status.ServedByAll {
			t.Errorf("%s: %+v", r.Name, r.Status)
		}
	}
	if hasGV(out.Discovery.Status.APIs.Items, "ghost.example.com", "v1") || len(out.Discovery.Status.Sources) != 1 {
		t.Errorf("discovery uses a peer with no document: %+v", out.Discovery.Status.Sources)
	}
	p := peerByID(out, "b")
	if p == nil {
		t.Fatal("a peer with no document has no APIServerPeer")
	}
	c := p.Status.Conditions[0]
	if c.Status != metav1.ConditionFalse || c.Reason != "Pending" || c.Message != "discovery not read yet" || p.Status.ResourceCount != 0 ||
		p.Status.GroupCount != 0 || p.Status.LastSyncTime != nil {
		t.Errorf("pending peer: %+v", p.Status)
	}
}

func TestComputeStalePeerKeepsDocument(t *testing.T) {
	a := readyPeer("a", coreDoc, docs(grp("apps", ver("v1", res("deployments")))))
	b := readyPeer("b", coreDoc, docs(grp("new.example.com", ver("v1", res("widgets")))))
	b.Ready, b.Stale, b.ReadyReason, b.LastError = false, true, "ConnectionRefused", "ConnectionRefused /api: dial tcp: connection refused"
	out, err := Compute(Input{Peers: []Peer{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if !hasGV(out.Discovery.Status.APIs.Items, "new.example.com", "v1") {
		t.Error("a stale peer's last good document left the merged discovery")
	}
	want := []v1alpha1.DiscoverySource{
		{ServerID: "a"},
		{ServerID: "b", Stale: true},
	}
	assertEqual(t, "sources", want, out.Discovery.Status.Sources)
	rt := routeByName(out, "widgets.v1.new.example.com")
	if rt == nil || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].Left {
		t.Fatalf("route of a stale peer: %+v", rt)
	}
	p := peerByID(out, "b")
	if !p.Status.Stale || p.Status.LastError == "" || p.Status.Conditions[0].Reason != "ConnectionRefused" || p.Status.Conditions[0].Status != metav1.ConditionFalse {
		t.Errorf("stale peer status: %+v", p.Status)
	}
}

func TestComputePeerObjects(t *testing.T) {
	a := readyPeer("kube-apiserver-a", coreDoc, docs(
		grp("apps", ver("v1", res("deployments"), res("statefulsets")), ver("v1beta1", res("deployments"))),
		grp("batch", ver("v1", res("jobs"))),
	))
	a.Sources = []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease, v1alpha1.PeerSourceEndpointSlice}
	sourcesBefore := slices.Clone(a.Sources)
	// The same core group in /apis (a broken server) counts once.
	a.APIs = append(slices.Clone(a.APIs), coreDoc[0])
	noReason := Peer{ServerID: "10.0.0.9:6443", Endpoint: "10.0.0.9:6443", Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice}}
	in := []Peer{a, noReason}
	out, err := Compute(Input{Peers: in})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in[0].Sources, sourcesBefore) {
		t.Error("Compute modified its input's sources")
	}
	want := v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver-a"},
		Spec: v1alpha1.APIServerPeerSpec{
			ServerID: "kube-apiserver-a", Endpoint: "kube-apiserver-a.example:6443", BinaryVersion: "v1.37.2",
			Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceRegistrationLease},
		},
		Status: v1alpha1.APIServerPeerStatus{
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "DiscoverySynced", LastTransitionTime: metav1.NewTime(t0),
			}},
			LastSyncTime:  &metav1.Time{Time: t0},
			DiscoveryETag: `"apis-kube-apiserver-a"`,
			GroupCount:    3, // "", apps, batch
			ResourceCount: 7, // pods configmaps nodes deployments statefulsets deployments(v1beta1) jobs
		},
	}
	assertEqual(t, "APIServerPeer", want, *peerByID(out, "kube-apiserver-a"))
	p := peerByID(out, "10.0.0.9:6443")
	if p.Name != "10.0.0.9-6443" || p.Status.Conditions[0].Reason != "Unknown" || p.Status.Conditions[0].Status != metav1.ConditionFalse {
		t.Errorf("address peer: %s %+v", p.Name, p.Status.Conditions)
	}
	if out.Peers[0].Spec.ServerID != "10.0.0.9:6443" || out.Peers[1].Spec.ServerID != "kube-apiserver-a" {
		t.Error("peers not sorted by server ID")
	}
}
