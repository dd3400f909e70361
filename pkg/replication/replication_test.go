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

package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

const eventually = 20 * time.Second

// testView: peer a (v1.37) serves apps/v1 and resource.k8s.io/v1beta2,
// peer b (v1.36) apps/v1 only; bReady flips b's readiness.
func testView(t *testing.T, bReady bool, extra int) compute.Output {
	t.Helper()
	res := func(name string) apidiscoveryv2.APIResourceDiscovery {
		return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list"},
			ResponseKind: &metav1.GroupVersionKind{Kind: name}}
	}
	group := func(g, v string, rs ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIGroupDiscovery {
		return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: v, Resources: rs, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}}}
	}
	var more []apidiscoveryv2.APIResourceDiscovery
	for i := 0; i < extra; i++ {
		more = append(more, res(fmt.Sprintf("things%03d", i)))
	}
	// Sub-second times: the wire keeps what clients see (RFC 3339 seconds).
	now := time.Unix(1_800_000_000, 123456789)
	a := compute.Peer{ServerID: "kube-apiserver-a", Endpoint: "10.0.0.1:6443", BinaryVersion: "v1.37.2", Ready: true,
		ReadyReason: "DiscoverySynced", ReadyTransition: now, LastSyncTime: now, HasDocument: true,
		Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
		APIs: []apidiscoveryv2.APIGroupDiscovery{group("apps", "v1", res("deployments")), group("resource.k8s.io", "v1beta2", res("deviceclasses")),
			group("example.com", "v1", more...)}}
	b := compute.Peer{ServerID: "kube-apiserver-b", Endpoint: "10.0.0.2:6443", BinaryVersion: "v1.36.3", Ready: bReady,
		ReadyReason: "DiscoverySynced", ReadyTransition: now, LastSyncTime: now, HasDocument: true,
		Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
		APIs:    []apidiscoveryv2.APIGroupDiscovery{group("apps", "v1", res("deployments"))}}
	if !bReady {
		b.ReadyReason = "ConnectionRefused"
	}
	out, err := compute.Compute(compute.Input{Peers: []compute.Peer{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var resources = []string{"apiserverpeers", "peeraggregateddiscoveries", "peerroutingtables"}

// listJSON is what a client gets: every object of every resource as JSON,
// resourceVersions included.
func listJSON(v *registry.ViewStore) (string, error) {
	out := ""
	for _, r := range resources {
		l, err := v.Storage()[r].(rest.Lister).List(context.Background(), nil)
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(l)
		if err != nil {
			return "", err
		}
		out += string(b) + "\n"
	}
	return out, nil
}

func serve(t *testing.T, v *registry.ViewStore) *httptest.Server {
	srv := httptest.NewTLSServer(&Handler{Clock: v.Clock(), Progress: 50 * time.Millisecond})
	t.Cleanup(srv.Close)
	return srv
}

// follow runs a Follower of v against srv until the test ends.
func follow(t *testing.T, v *registry.ViewStore, srv *httptest.Server) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{Replica: v, Silence: time.Second, Dial: func(context.Context, string) (*http.Client, string, error) {
		return srv.Client(), srv.URL, nil
	}}
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, "leader") }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func waitSame(t *testing.T, a, b *registry.ViewStore) {
	t.Helper()
	deadline := time.Now().Add(eventually)
	for {
		la, errA := listJSON(a)
		lb, errB := listJSON(b)
		if errA == nil && errB == nil && la == lb {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas differ (%v, %v):\n%s\n%s", errA, errB, la, lb)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func watchFrom(t *testing.T, v *registry.ViewStore, resource, rv string) watch.Interface {
	t.Helper()
	w, err := v.Storage()[resource].(rest.Watcher).Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatalf("watch %s from %s: %v", resource, rv, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func nextEvent(t *testing.T, w watch.Interface) (watch.EventType, string) {
	t.Helper()
	select {
	case e, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch ended")
		}
		b, _ := json.Marshal(e.Object)
		return e.Type, string(b)
	case <-time.After(eventually):
		t.Fatal("no event")
	}
	return "", ""
}

func listRV(t *testing.T, v *registry.ViewStore, resource string) string {
	t.Helper()
	l, err := v.Storage()[resource].(rest.Lister).List(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return l.(metav1.ListMetaAccessor).GetListMeta().GetResourceVersion()
}

func review(t *testing.T, v *registry.ViewStore, path string) v1alpha1.RouteReviewStatus {
	t.Helper()
	table, ok := v.RoutingTable()
	if !ok {
		t.Fatal("no routing table")
	}
	st, err := routing.Review(table, v1alpha1.RouteReviewSpec{Verb: "get", Path: path, SourcePeer: "kube-apiserver-b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestFollowerServesTheLeadersStateAndTakesOver(t *testing.T) {
	a := registry.NewViewStore(time.Minute, clock.RealClock{}, false) // leads
	b := registry.NewViewStore(time.Minute, clock.RealClock{}, true)
	t.Cleanup(a.Stop)
	t.Cleanup(b.Stop)
	if err := a.Publish(testView(t, true, 20)); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(testView(t, false, 3)); err != nil { // a follower keeps its own view aside
		t.Fatal(err)
	}
	if err := b.ReadyzCheck().Check(nil); err == nil {
		t.Fatal("a follower that never heard from its leader must not be ready")
	}
	if _, err := listJSON(b); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("reading a follower that has no state yet: %v, want 429 (client-go retries its watch)", err)
	}
	stopB := follow(t, b, serve(t, a))
	waitSame(t, a, b)
	if err := b.ReadyzCheck().Check(nil); err != nil {
		t.Fatalf("follower in step: %v", err)
	}
	path := "/apis/resource.k8s.io/v1beta2/deviceclasses"
	if ra, rb := review(t, a, path), review(t, b, path); !reflect.DeepEqual(ra, rb) {
		t.Fatalf("RouteReview differs: leader %+v, follower %+v", ra, rb)
	}

	// Watches started with the same RV on each replica see the same
	// events at the same RVs.
	rv := listRV(t, a, "apiserverpeers")
	wa, wb := watchFrom(t, a, "apiserverpeers", rv), watchFrom(t, b, "apiserverpeers", rv)
	if err := a.Publish(testView(t, false, 20)); err != nil {
		t.Fatal(err)
	}
	ta, ea := nextEvent(t, wa)
	tb, eb := nextEvent(t, wb)
	if ta != tb || ea != eb {
		t.Fatalf("events differ:\n%s %s\n%s %s", ta, ea, tb, eb)
	}
	waitSame(t, a, b)
	last := listRV(t, b, "peerroutingtables")

	// Hand-over: a stops leading, b leads and publishes what it had kept
	// aside, a follows b. A watch resumed on either with the last RV seen
	// continues: no 410.
	a.Demote()
	stopB()
	if err := b.Lead(); err != nil {
		t.Fatal(err)
	}
	follow(t, a, serve(t, b))
	waitSame(t, a, b)
	for _, v := range []*registry.ViewStore{a, b, a} {
		watchFrom(t, v, "peerroutingtables", last)
	}
	if err := b.Publish(testView(t, true, 5)); err != nil {
		t.Fatal(err)
	}
	waitSame(t, a, b)
	if ra, rb := review(t, a, path), review(t, b, path); !reflect.DeepEqual(ra, rb) {
		t.Fatalf("RouteReview differs after the hand-over: %+v vs %+v", ra, rb)
	}
	// A replica that does not lead serves no stream.
	resp, err := serve(t, a).Client().Get(serve(t, a).URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream from a follower: %d, want 503", resp.StatusCode)
	}
}

func TestFollowerOfAFormerTimelineRelistsOnlyWhatItCannotVouchFor(t *testing.T) {
	a := registry.NewViewStore(time.Minute, clock.RealClock{}, false)
	t.Cleanup(a.Stop)
	if err := a.Publish(testView(t, true, 2)); err != nil {
		t.Fatal(err)
	}
	// c is a replica that led on its own (a split, or an old process):
	// its RVs mean nothing on a's timeline.
	c := registry.NewViewStore(time.Minute, clock.RealClock{}, false)
	t.Cleanup(c.Stop)
	if err := c.Publish(testView(t, false, 2)); err != nil {
		t.Fatal(err)
	}
	foreign := listRV(t, c, "peerroutingtables")
	c.Demote()
	follow(t, c, serve(t, a))
	waitSame(t, a, c)
	_, err := c.Storage()["peerroutingtables"].(rest.Watcher).Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: foreign})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from an RV of another timeline: %v, want 410", err)
	}
}

func TestWireRoundTripKeepsWhatClientsSee(t *testing.T) {
	a := registry.NewViewStore(time.Minute, clock.RealClock{}, false)
	t.Cleanup(a.Stop)
	if err := a.Publish(testView(t, false, 3)); err != nil {
		t.Fatal(err)
	}
	start, sub, err := a.Clock().Subscribe(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	snap := *start.Snapshot
	w, err := encodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(frame{Snapshot: w})
	var back frame
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	got, err := decodeSnapshot(a.Clock().NewObject, back.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if got.Timeline.Current != snap.Timeline.Current || len(got.Stores) != len(snap.Stores) {
		t.Fatalf("timeline or stores lost: %+v", got.Timeline)
	}
	for i := range snap.Stores {
		for j, o := range snap.Stores[i].Items {
			want, _ := json.Marshal(o)
			have, _ := json.Marshal(got.Stores[i].Items[j])
			if string(want) != string(have) {
				t.Fatalf("%s item %d:\n%s\n%s", snap.Stores[i].Resource, j, want, have)
			}
		}
	}
	if _, err := decodeObject(a.Clock().NewObject, "nope", []byte("{}")); err == nil {
		t.Fatal("an unknown store must be an error")
	}
}
