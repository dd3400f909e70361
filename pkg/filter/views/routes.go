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
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// rebuildDelay coalesces bursts of watch events into one table rebuild.
const rebuildDelay = 50 * time.Millisecond

// Routes keeps informer caches of PeerRoutingTable, APIServerPeer
// and PeerAggregatedDiscovery, reached through the loopback client and the
// aggregator, and what they say as one immutable value (RoutesState),
// swapped in whole: a reader sees the table, the merged discovery, whether
// they synced and whether their source is down as of one moment. Once
// synced, the caches keep routing if peerdiscovery-apiserver goes away.
type Routes struct {
	current atomic.Pointer[RoutesState]
	mu      sync.Mutex // serializes writers of current
	dirty   chan struct{}
	clock   clock.WithTickerAndDelayedExecution
	// onChange, when set, is called after each change of current (the
	// routing snapshot is published from it).
	onChange func()
	// onPeerStopped, when set, is called for each peer that was ready and
	// no longer is (or is gone), after the table that says so is in use.
	onPeerStopped func(id string)

	routes, peers, discovery cache.SharedIndexInformer

	// down holds, per informer, whether its last list or watch failed
	// (guarded by mu): the view is stale while any is, since one
	// informer's success says nothing of another's backoff.
	down map[string]bool
}

// RoutesState is what the routes view knows at one moment; immutable.
type RoutesState struct {
	// Table is never nil (empty before the first rebuild).
	Table  *routing.Table
	Merged *v1alpha1.PeerAggregatedDiscovery
	Synced bool
	// Stale is set while the last list or watch of any of the three
	// failed: the view cannot be read now (every peerdiscovery-apiserver
	// replica down), so it may be stale.
	Stale bool
}

func newRoutes() *Routes {
	s := &Routes{dirty: make(chan struct{}, 1), clock: clock.RealClock{}, down: map[string]bool{}}
	s.current.Store(&RoutesState{Table: routing.NewTable(nil, nil)})
	return s
}

// value is the view's current state; read only.
func (s *Routes) Current() *RoutesState { return s.current.Load() }

func (s *Routes) table() *routing.Table { return s.Current().Table }
func (s *Routes) Synced() bool          { return s.Current().Synced }

// update swaps in a changed copy of the current state, then tells
// onChange; a change that changes nothing is not published.
func (s *Routes) update(change func(*RoutesState)) {
	s.mu.Lock()
	prev := s.current.Load()
	next := *prev
	change(&next)
	changed := next != *prev
	if changed {
		s.current.Store(&next)
	}
	s.mu.Unlock()
	if changed && s.onChange != nil {
		s.onChange()
	}
}

// PeerReady tells whether the view says a peer is ready; a peer no
// APIServerPeer names is left to the routing tables.
func (s *Routes) PeerReady(id string) bool {
	p, ok := s.table().Peer(id)
	return !ok || p.Ready
}

// ListsPeer tells whether the view lists a server (an APIServerPeer names
// it), and whether the view is known at all (the caches synced).
func (s *Routes) ListsPeer(id string) (listed, known bool) {
	v := s.Current()
	if !v.Synced {
		return false, false
	}
	_, listed = v.Table.Peer(id)
	return listed, true
}

// PeerObject is the APIServerPeer of server id, if the view has one.
func (s *Routes) PeerObject(id string) (*v1alpha1.APIServerPeer, bool) {
	if s.peers == nil {
		return nil, false
	}
	for _, obj := range s.peers.GetStore().List() {
		if p, ok := obj.(*v1alpha1.APIServerPeer); ok && p.Spec.ServerID == id {
			return p, true
		}
	}
	return nil, false
}

func newRESTClient(loopback *rest.Config) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(loopback)
	cfg.GroupVersion = &v1alpha1.SchemeGroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = codecs.WithoutConversion()
	// The loopback config asks for protobuf; these types are JSON only.
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	cfg.UserAgent += " peerdiscovery-filter"
	return rest.RESTClientFor(cfg)
}

func (s *Routes) Start(ctx context.Context, loopback *rest.Config) error {
	client, err := newRESTClient(loopback)
	if err != nil {
		return err
	}
	s.run(ctx, func(resource string) cache.ListerWatcher {
		return s.trackSource(resource, stampInput(countRelists(newListWatch(client, resource, watchedFields(resource)), resource), resource))
	})
	return nil
}

// routedTables selects the routing tables that can decide a route here.
// A cluster-wide table (a CRD's, an aggregated APIService's) never does:
// Decide answers Local for it and NotFound without it, and the local chain
// answers both. At thousands of CRDs they are nearly every table, and
// keeping them cost each kube-apiserver most of its informer memory and a
// rebuild of thousands of routes on every change.
var routedTables = fields.OneTermEqualSelector("status.clusterWide", "false")

func watchedFields(resource string) fields.Selector {
	if resource == "peerroutingtables" {
		return routedTables
	}
	return fields.Everything()
}

// trackSource records whether lw's last list or watch could be opened,
// and whether an open watch then ended with an error: when every replica
// dies the stream breaks mid-way, and client-go waits its backoff (14 s in
// seed 2718's soak) before the list that would fail, while the view it
// holds still calls a restarted server not ready. Each resource counts
// apart: in the same soak the APIServerPeer informer backed off for 49 s
// after a failed list while the other two read the view again, and one
// shared flag called the view fresh.
func (s *Routes) trackSource(resource string, lw *cache.ListWatch) *cache.ListWatch {
	return hookListWatch(lw, func(err error) { s.setSourceDown(resource, err != nil) }, func(_ metav1.ListOptions, w watch.Interface) watch.Interface {
		s.setSourceDown(resource, w == nil)
		if w == nil {
			return w
		}
		return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			if e.Type == watch.Error {
				s.setSourceDown(resource, true)
			}
			return e, true
		})
	})
}

// setSourceDown records one informer's source state; the view is stale
// while any informer's is down.
func (s *Routes) setSourceDown(resource string, down bool) {
	s.update(func(v *RoutesState) { // under mu, which guards down
		s.down[resource] = down
		v.Stale = false
		for _, d := range s.down {
			v.Stale = v.Stale || d
		}
	})
}

// countRelists counts the full state reads of an informer after its first:
// a List, or a watch that asks for the initial state (client-go's watch-list
// replaces the List with one). Either means the informer could not resume.
func countRelists(lw *cache.ListWatch, resource string) *cache.ListWatch {
	var reads atomic.Int64
	full := func() {
		if reads.Add(1) > 1 {
			metrics.Relisted(resource)
		}
	}
	return hookListWatch(lw, func(error) { full() }, func(o metav1.ListOptions, w watch.Interface) watch.Interface {
		if o.SendInitialEvents != nil && *o.SendInitialEvents {
			full()
		}
		return w
	})
}

// stampInput records when the informer of resource last received
// anything: a list, or any watch event, bookmarks included
// (peerdiscovery_filter_informer_last_input_timestamp_seconds). A watch
// that stalled shows as input that grows old while nothing else does.
func stampInput(lw *cache.ListWatch, resource string) *cache.ListWatch {
	stamp := metrics.InputStamp(resource)
	return hookListWatch(lw, func(err error) {
		if err == nil {
			stamp.SetToCurrentTime()
		}
	}, func(_ metav1.ListOptions, w watch.Interface) watch.Interface {
		if w == nil {
			return nil
		}
		return watch.Filter(w, func(e watch.Event) (watch.Event, bool) { stamp.SetToCurrentTime(); return e, true })
	})
}

// hookListWatch calls listed after each list of lw with its error, and
// passes each watch it opens (nil on an error) through watched.
func hookListWatch(lw *cache.ListWatch, listed func(error), watched func(metav1.ListOptions, watch.Interface) watch.Interface) *cache.ListWatch {
	if f := lw.ListFunc; f != nil {
		lw.ListFunc = func(o metav1.ListOptions) (runtime.Object, error) {
			obj, err := f(o)
			listed(err)
			return obj, err
		}
	}
	if f := lw.ListWithContextFunc; f != nil {
		lw.ListWithContextFunc = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := f(ctx, o)
			listed(err)
			return obj, err
		}
	}
	if f := lw.WatchFunc; f != nil {
		lw.WatchFunc = func(o metav1.ListOptions) (watch.Interface, error) {
			w, err := f(o)
			return watched(o, w), err
		}
	}
	if f := lw.WatchFuncWithContext; f != nil {
		lw.WatchFuncWithContext = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := f(ctx, o)
			return watched(o, w), err
		}
	}
	return lw
}

// run starts the informers over the list-watchers lw gives for each
// resource, the table rebuilds and the sync report.
func (s *Routes) run(ctx context.Context, lw func(resource string) cache.ListerWatcher) {
	inf := func(resource string, obj runtime.Object) cache.SharedIndexInformer {
		i := cache.NewSharedIndexInformer(lw(resource), obj, 0, cache.Indexers{})
		_, _ = i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(interface{}) { s.markDirty() },
			UpdateFunc: func(interface{}, interface{}) { s.markDirty() },
			DeleteFunc: func(interface{}) { s.markDirty() },
		})
		return i
	}
	s.routes = inf("peerroutingtables", &v1alpha1.PeerRoutingTable{})
	s.peers = inf("apiserverpeers", &v1alpha1.APIServerPeer{})
	s.discovery = inf("peeraggregateddiscoveries", &v1alpha1.PeerAggregatedDiscovery{})
	for _, i := range []cache.SharedIndexInformer{s.routes, s.peers, s.discovery} {
		go i.Run(ctx.Done())
	}
	go s.rebuildLoop(ctx)
	go s.reportSync(ctx)
}

func (s *Routes) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *Routes) rebuildLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		}
		// Let a burst of events land before rebuilding once.
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(rebuildDelay):
		}
		s.rebuild(ctx)
	}
}

func (s *Routes) rebuild(ctx context.Context) {
	var tables []*v1alpha1.PeerRoutingTable
	for _, o := range s.routes.GetStore().List() {
		if t, ok := o.(*v1alpha1.PeerRoutingTable); ok {
			tables = append(tables, t)
		}
	}
	var peers []*v1alpha1.APIServerPeer
	for _, o := range s.peers.GetStore().List() {
		if p, ok := o.(*v1alpha1.APIServerPeer); ok {
			peers = append(peers, p)
		}
	}
	next := routing.NewTable(tables, peers)
	// A deleted document must not be served on: without one, the chain
	// answers with this server's own discovery.
	var merged *v1alpha1.PeerAggregatedDiscovery
	if o, ok, _ := s.discovery.GetStore().GetByKey(v1alpha1.PeerAggregatedDiscoveryName); ok {
		merged, _ = o.(*v1alpha1.PeerAggregatedDiscovery)
	}
	var prev *routing.Table
	nowSynced := false
	s.update(func(v *RoutesState) {
		prev = v.Table
		v.Table, v.Merged = next, merged
		if !v.Synced && s.routes.HasSynced() && s.peers.HasSynced() && s.discovery.HasSynced() {
			v.Synced, nowSynced = true, true
		}
	})
	if s.onPeerStopped != nil {
		for _, p := range prev.Peers() {
			if now, ok := next.Peer(p.ID); p.Ready && (!ok || !now.Ready) {
				s.onPeerStopped(p.ID)
			}
		}
	}
	if nowSynced {
		metrics.SetCacheSynced(true)
		klog.FromContext(ctx).Info("peerdiscovery filter: routing caches synced; routing requests to peers", "routes", len(tables), "peers", len(peers))
	}
}

// reportSync logs, once, while peerdiscovery-apiserver cannot be reached:
// the server then serves everything locally.
func (s *Routes) reportSync(ctx context.Context) {
	metrics.SetCacheSynced(false)
	t := s.clock.NewTicker(time.Second)
	defer t.Stop()
	warned := false
	start := s.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if s.routes.HasSynced() && s.peers.HasSynced() && s.discovery.HasSynced() {
			// An empty list syncs without events: rebuild once.
			if !s.Synced() {
				s.rebuild(ctx)
			}
			return
		}
		if !warned && s.clock.Since(start) > 10*time.Second {
			klog.FromContext(ctx).Info("peerdiscovery filter: peerdiscovery.k8s.io is not reachable yet; serving every request locally until it is")
			warned = true
		}
	}
}
