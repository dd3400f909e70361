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

package views

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// fakeLW serves one list, then a watch the test drives.
type fakeLW struct {
	list runtime.Object
	w    *watch.FakeWatcher
}

func newFakeLW(list runtime.Object) *fakeLW { return &fakeLW{list: list, w: watch.NewFake()} }

func (f *fakeLW) List(metav1.ListOptions) (runtime.Object, error) {
	return f.list.DeepCopyObject(), nil
}
func (f *fakeLW) Watch(metav1.ListOptions) (watch.Interface, error) { return f.w, nil }

// IsWatchListSemanticsUnSupported makes the reflector list, then watch.
func (f *fakeLW) IsWatchListSemanticsUnSupported() bool { return true }

func peerWithReady(id, endpoint string, status metav1.ConditionStatus, rv string) *v1alpha1.APIServerPeer {
	return &v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: id, ResourceVersion: rv},
		Spec:       v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: endpoint},
		Status: v1alpha1.APIServerPeerStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: status, Reason: "Test"},
		}},
	}
}

func decideWidgets(s *Routes) routing.Result {
	return routing.Decide(&routing.Snapshot{Table: s.table(), Self: selfID, Local: routing.NewServed(nil)}, routing.Request{IsResourceRequest: true, GVR: widgetsGVR}, time.Now())
}

// TestRoutingStateFollowsTheInformers: the routing table and the merged
// discovery follow the peerdiscovery.k8s.io objects.
func TestRoutingStateFollowsTheInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := route(widgetsGVR, readyPeer("b", "10.0.0.2:6443"))
	rt.ResourceVersion = "1"
	merged := mergedDiscovery(t, "1", nil, nil)
	lws := map[string]*fakeLW{
		"peerroutingtables":         newFakeLW(&v1alpha1.PeerRoutingTableList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []v1alpha1.PeerRoutingTable{*rt}}),
		"apiserverpeers":            newFakeLW(&v1alpha1.APIServerPeerList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []v1alpha1.APIServerPeer{*peerWithReady("b", "10.0.0.2:6443", metav1.ConditionTrue, "1")}}),
		"peeraggregateddiscoveries": newFakeLW(&v1alpha1.PeerAggregatedDiscoveryList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []v1alpha1.PeerAggregatedDiscovery{*merged}}),
	}
	s := newRoutes()
	if s.Synced() || s.table().Len() != 0 {
		t.Fatal("a new state must be empty and not synced")
	}
	s.run(ctx, func(resource string) cache.ListerWatcher { return lws[resource] })

	eventually(t, "synced", s.Synced)
	if res := decideWidgets(s); res.Decision != v1alpha1.RouteProxy || res.Candidates[0].ID != "b" {
		t.Fatalf("after sync: %s %v", res.Decision, res.Candidates)
	}
	if d := s.Current().Merged; d == nil || d.ResourceVersion != "1" {
		t.Fatalf("merged discovery %v", d)
	}

	// The peer's own object going not-ready is enough.
	lws["apiserverpeers"].w.Modify(peerWithReady("b", "10.0.0.2:6443", metav1.ConditionFalse, "2"))
	eventually(t, "b not ready", func() bool { return decideWidgets(s).Decision == v1alpha1.RouteUnavailable })

	// A new peer serving widgets appears, ready, in the routing table.
	lws["apiserverpeers"].w.Add(peerWithReady("c", "10.0.0.3:6443", metav1.ConditionTrue, "3"))
	rt2 := route(widgetsGVR, readyPeer("b", "10.0.0.2:6443"), readyPeer("c", "10.0.0.3:6443"))
	rt2.ResourceVersion = "3"
	lws["peerroutingtables"].w.Modify(rt2)
	eventually(t, "c ready", func() bool {
		res := decideWidgets(s)
		return res.Decision == v1alpha1.RouteProxy && len(res.Candidates) == 1 && res.Candidates[0].ID == "c"
	})

	// The route goes away: NotFound.
	lws["peerroutingtables"].w.Delete(rt2)
	eventually(t, "route deleted", func() bool { return decideWidgets(s).Decision == v1alpha1.RouteNotFound })

	// A new merged document replaces the old; a deleted one is not served
	// any more (the chain answers with this server's own discovery).
	merged2 := mergedDiscovery(t, "4", nil, nil)
	lws["peeraggregateddiscoveries"].w.Modify(merged2)
	eventually(t, "new merged discovery", func() bool {
		d := s.Current().Merged
		return d != nil && d.ResourceVersion == "4"
	})
	lws["peeraggregateddiscoveries"].w.Delete(merged2)
	eventually(t, "merged discovery dropped", func() bool { return s.Current().Merged == nil })
}

// TestRoutingStateSyncsWithEmptyLists: empty lists bring no events; the
// state still becomes synced.
func TestRoutingStateSyncsWithEmptyLists(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lws := map[string]*fakeLW{
		"peerroutingtables":         newFakeLW(&v1alpha1.PeerRoutingTableList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}),
		"apiserverpeers":            newFakeLW(&v1alpha1.APIServerPeerList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}),
		"peeraggregateddiscoveries": newFakeLW(&v1alpha1.PeerAggregatedDiscoveryList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}),
	}
	s := newRoutes()
	s.run(ctx, func(resource string) cache.ListerWatcher { return lws[resource] })
	eventually(t, "synced", s.Synced)
	if s.table().Len() != 0 || s.Current().Merged != nil {
		t.Fatal("empty lists must give an empty state")
	}
}

func TestRelistsCountedAfterTheFirstFullRead(t *testing.T) {
	metrics.Register()
	// A label of its own per run: the registry outlives a run (-count).
	res := fmt.Sprintf("relist-test-%d", time.Now().UnixNano())
	lw := countRelists(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &v1alpha1.PeerRoutingTableList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewEmptyWatch(), nil
		},
	}, res)
	count := func() float64 {
		v, err := testutil.GetCounterMetricValue(metrics.InformerRelists.WithLabelValues(res))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ctx := context.Background()
	yes := true
	// First sync by watch-list, then resumed watches: no relist.
	_, _ = lw.WatchFuncWithContext(ctx, metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	_, _ = lw.WatchFuncWithContext(ctx, metav1.ListOptions{ResourceVersion: "5"})
	if c := count(); c != 0 {
		t.Fatalf("relists after the first sync and a resume: %v, want 0", c)
	}
	// A 410 makes the reflector list again: counted, and so is a second
	// watch-list.
	_, _ = lw.ListWithContextFunc(ctx, metav1.ListOptions{})
	_, _ = lw.WatchFuncWithContext(ctx, metav1.ListOptions{SendInitialEvents: &yes})
	if c := count(); c != 2 {
		t.Fatalf("relists: %v, want 2", c)
	}
}

// The filter lists and watches only the routing tables that can decide a
// route here: not the cluster-wide ones (at thousands of CRDs nearly all
// of them), which the local chain answers with or without a table.
func TestRoutingStateWatchesOnlyTablesThatRoute(t *testing.T) {
	var mu sync.Mutex
	queries := map[string][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource := path.Base(r.URL.Path)
		mu.Lock()
		queries[resource] = append(queries[resource], r.URL.Query().Get("fieldSelector"))
		mu.Unlock()
		kind := map[string]string{"peerroutingtables": "PeerRoutingTable", "apiserverpeers": "APIServerPeer", "peeraggregateddiscoveries": "PeerAggregatedDiscovery"}[resource]
		serveListOrWatchList(w, r, "peerdiscovery.k8s.io/v1alpha1", kind)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newRoutes()
	if err := s.Start(ctx, &rest.Config{Host: srv.URL}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "synced", s.Synced)
	eventually(t, "every resource read", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range []string{"peerroutingtables", "apiserverpeers", "peeraggregateddiscoveries"} {
			if len(queries[r]) < 1 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for resource, want := range map[string]string{"peerroutingtables": "status.clusterWide=false", "apiserverpeers": "", "peeraggregateddiscoveries": ""} {
		for _, got := range queries[resource] {
			if got != want {
				t.Errorf("%s asked with fieldSelector %q, want %q", resource, got, want)
			}
		}
	}
}

// TestRoutingStateKnowsWhenTheViewCannotBeRead: a failed list or watch of
// the view marks it stale (every replica down), the next one that works
// marks it current again.
func TestRoutingStateKnowsWhenTheViewCannotBeRead(t *testing.T) {
	s := newRoutes()
	fail := false
	lw := s.trackSource("apiserverpeers", &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			if fail {
				return nil, errors.New("the aggregator: 503")
			}
			return &v1alpha1.APIServerPeerList{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
			if fail {
				return nil, errors.New("the aggregator: 503")
			}
			return watch.NewFake(), nil
		},
	})
	for _, step := range []struct {
		fail, watch, stale bool
	}{{false, false, false}, {true, true, true}, {true, false, true}, {false, true, false}, {true, false, true}, {false, false, false}} {
		fail = step.fail
		if step.watch {
			_, _ = lw.Watch(metav1.ListOptions{})
		} else {
			_, _ = lw.List(metav1.ListOptions{})
		}
		if s.Current().Stale != step.stale {
			t.Fatalf("after a %s that failed=%v: stale=%v, want %v", map[bool]string{true: "watch", false: "list"}[step.watch], step.fail, s.Current().Stale, step.stale)
		}
	}
}

// TestRoutingStateStopsPeersThatTurnNotReady: a peer that was ready and
// no longer is (or is gone) is stopped once, after the table that says so
// is in use; a peer that never was ready is not.
func TestRoutingStateStopsPeersThatTurnNotReady(t *testing.T) {
	metrics.Register() // the state reports its sync through them
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lws := map[string]*fakeLW{
		"peerroutingtables": newFakeLW(&v1alpha1.PeerRoutingTableList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}),
		"apiserverpeers": newFakeLW(&v1alpha1.APIServerPeerList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []v1alpha1.APIServerPeer{
			*peerWithReady("b", "10.0.0.2:6443", metav1.ConditionTrue, "1"),
			*peerWithReady("d", "10.0.0.4:6443", metav1.ConditionTrue, "1"),
		}}),
		"peeraggregateddiscoveries": newFakeLW(&v1alpha1.PeerAggregatedDiscoveryList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}),
	}
	s := newRoutes()
	var mu sync.Mutex
	var stopped []string
	s.onPeerStopped = func(id string) {
		mu.Lock()
		defer mu.Unlock()
		// The table in use says so already.
		if p, _ := s.table().Peer(id); p.Ready {
			t.Errorf("%s stopped while the table in use has it ready", id)
		}
		stopped = append(stopped, id)
	}
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(stopped)
	}
	s.run(ctx, func(resource string) cache.ListerWatcher { return lws[resource] })
	eventually(t, "synced", s.Synced)

	lws["apiserverpeers"].w.Modify(peerWithReady("b", "10.0.0.2:6443", metav1.ConditionFalse, "2"))
	eventually(t, "b stopped", func() bool { return slices.Equal(got(), []string{"b"}) })
	// Not ready from the start: nothing in flight to stop.
	lws["apiserverpeers"].w.Add(peerWithReady("c", "10.0.0.3:6443", metav1.ConditionFalse, "3"))
	// Gone while ready.
	lws["apiserverpeers"].w.Delete(peerWithReady("d", "10.0.0.4:6443", metav1.ConditionTrue, "4"))
	eventually(t, "d stopped", func() bool { return slices.Equal(got(), []string{"b", "d"}) })
	// b, not ready already, goes: no second stop.
	lws["apiserverpeers"].w.Delete(peerWithReady("b", "10.0.0.2:6443", metav1.ConditionFalse, "5"))
	eventually(t, "b gone", func() bool { _, ok := s.table().Peer("b"); return !ok })
	if g := got(); !slices.Equal(g, []string{"b", "d"}) {
		t.Errorf("stopped %v, want [b d]", g)
	}
}

// A watch that opened and then broke (every replica killed: the stream
// ends with an Error event) makes the view stale at once, not after
// client-go's backoff and the list that follows it.
func TestRoutingStateKnowsWhenAWatchOfTheViewBreaks(t *testing.T) {
	s := newRoutes()
	fake := watch.NewFakeWithChanSize(2, false) // sends never wait for the reader
	lw := s.trackSource("apiserverpeers", &cache.ListWatch{
		ListFunc:  func(metav1.ListOptions) (runtime.Object, error) { return &v1alpha1.APIServerPeerList{}, nil },
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return fake, nil },
	})
	w, err := lw.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fake.Add(&v1alpha1.APIServerPeer{})
	if e := <-w.ResultChan(); e.Type != watch.Added || s.Current().Stale {
		t.Fatalf("after an event: %s, stale=%v", e.Type, s.Current().Stale)
	}
	fake.Error(&metav1.Status{Status: metav1.StatusFailure, Message: "unable to decode an event from the watch stream: stream error"})
	if e := <-w.ResultChan(); e.Type != watch.Error {
		t.Fatalf("got %s, want the Error event passed on", e.Type)
	}
	if !s.Current().Stale {
		t.Fatal("a watch that ended with an error left the view fresh")
	}
	if _, err := lw.List(metav1.ListOptions{}); err != nil || s.Current().Stale {
		t.Fatalf("after a list that worked: err=%v stale=%v, want fresh", err, s.Current().Stale)
	}
}

// One informer's success does not make the view fresh while another's
// source is down (seed 2718: the APIServerPeer informer backed off for
// 49 s after a failed list while the other two read the view again).
func TestRoutingStateIsStaleWhileAnyInformerIsDown(t *testing.T) {
	s := newRoutes()
	peersFail := true
	peers := s.trackSource("apiserverpeers", &cache.ListWatch{ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
		if peersFail {
			return nil, errors.New("the aggregator: 503")
		}
		return &v1alpha1.APIServerPeerList{}, nil
	}})
	tables := s.trackSource("peerroutingtables", &cache.ListWatch{ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
		return &v1alpha1.PeerRoutingTableList{}, nil
	}})
	_, _ = peers.List(metav1.ListOptions{})
	_, _ = tables.List(metav1.ListOptions{})
	if !s.Current().Stale {
		t.Fatal("the routing tables' list made the view fresh while the peers' list fails")
	}
	peersFail = false
	_, _ = peers.List(metav1.ListOptions{})
	if s.Current().Stale {
		t.Fatal("stale after every informer read the view")
	}
}
