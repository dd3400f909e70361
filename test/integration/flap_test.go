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

package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// A peer turning NotReady and back changes its APIServerPeer, not every
// routing table naming it: readiness is not in routing tables. Only the
// Table output (kubectl get) shows it beside them, as of its rendering.
func TestPeerFlapChangesOnlyThePeer(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	if err := ts.srv.Publisher.Publish(view(10, true)); err != nil {
		t.Fatal(err)
	}
	c := ts.clientset(t, ts.admin()).PeerdiscoveryV1alpha1()
	deployments := func() *v1alpha1.PeerRoutingTable {
		t.Helper()
		rt, err := c.PeerRoutingTables().Get(ctx, "deployments.v1.apps", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	before := deployments()
	routes, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	peers, err := c.APIServerPeers().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.PeerRoutingTables().Watch(ctx, metav1.ListOptions{ResourceVersion: routes.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	pw, err := c.APIServerPeers().Watch(ctx, metav1.ListOptions{ResourceVersion: peers.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Stop()

	// Flap b three times; then add one table as a sentinel.
	for _, ready := range []bool{false, true, false} {
		if err := ts.srv.Publisher.Publish(view(10, ready)); err != nil {
			t.Fatal(err)
		}
		e := next(t, pw)
		if p := e.Object.(*v1alpha1.APIServerPeer); e.Type != watch.Modified || p.Spec.ServerID != "kube-apiserver-b" {
			t.Fatalf("peer event: %s %s", e.Type, p.Name)
		}
	}
	if err := ts.srv.Publisher.Publish(view(11, false)); err != nil {
		t.Fatal(err)
	}
	if e := next(t, rw); e.Type != watch.Added || e.Object.(*v1alpha1.PeerRoutingTable).Name != "things0010.v1.example.com" {
		t.Fatalf("first routing-table event after three flaps: %s %s, want only the sentinel", e.Type, e.Object.(*v1alpha1.PeerRoutingTable).Name)
	}

	// The routing table is the object it was, at the resourceVersion it had.
	if after := deployments(); !equality.Semantic.DeepEqual(before, after) {
		t.Fatalf("deployments.v1.apps changed with b's readiness:\n%+v\n%+v", before, after)
	}
	accept := "application/json;as=Table;v=v1;g=meta.k8s.io"
	code, body := ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables/deployments.v1.apps", "Accept", accept)
	if code != http.StatusOK || !strings.Contains(body, `"1/2"`) {
		t.Fatalf("table of deployments with b not ready: %d %s", code, body)
	}
	if err := ts.srv.Publisher.Publish(view(11, true)); err != nil {
		t.Fatal(err)
	}
	if code, body := ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables/deployments.v1.apps", "Accept", accept); code != http.StatusOK || !strings.Contains(body, `"2/2"`) {
		t.Fatalf("table of deployments with b ready again: %d %s", code, body)
	}
	// The selector on membership keeps working.
	notAll, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "status.servedByAll=false"})
	if err != nil || len(notAll.Items) != 12 {
		t.Fatalf("servedByAll=false after flaps: %d items, %v", len(notAll.Items), err)
	}
}
