//go:build !race

// Package scale checks the extension server's memory and watch fan-out at
// the scale the project states (5 peers × 5,000 GVRs), on the real registry
// path: the engine's compute, ViewStore.Publish, the REST storage, and
// watchers that encode what they receive with the server's codec, as the
// watch handler does. It runs without the race detector (which multiplies
// memory and time), in its own step of hack/test.sh.
package scale

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/apiserver"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/test/discoverydocs"
)

const (
	liveWatchers    = 1000
	heapBudget      = 256 << 20
	fanoutP99Budget = 100 * time.Millisecond
	// isolatedChanges are published one at a time for the fan-out budget.
	isolatedChanges = 60
)

// The stated scale; SCALE_PEERS, SCALE_GVRS and SCALE_VIEW_CHANGES change
// it for profiling and for the sizing table in docs/operations.md.
// SCALE_FULL_COMPUTE=1 recomputes ETag-only changes too (slower; for
// builds whose merged discovery carries the peers' ETags).
var (
	peers           = envInt("SCALE_PEERS", 5)
	gvrsPerPeer     = envInt("SCALE_GVRS", 5000)
	viewChanges     = envInt("SCALE_VIEW_CHANGES", 2000)
	flapEventBudget = uint64(peers + 5)
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// workload is the engine's input, changed one step at a time.
type workload struct {
	in       compute.Input
	crds     []string // CRD groups currently served
	next     int      // next CRD number
	etagPeer int      // the peer of the last ETag-only change
}

func newWorkload() *workload {
	w := &workload{in: compute.Input{ClusterWide: map[schema.GroupVersion]string{}}}
	for _, s := range discoverydocs.Servers(7, peers, 100, gvrsPerPeer) {
		w.in.Peers = append(w.in.Peers, compute.Peer{
			ServerID: s.ID, Endpoint: s.ID + ".example:6443", BinaryVersion: "v1.37.2",
			Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
			Ready:   true, ReadyReason: "DiscoverySynced", ReadyTransition: t0, LastSyncTime: t0,
			HasDocument: true, APIs: s.Groups, APIETag: `"api-0"`, APIsETag: `"apis-0"`,
		})
	}
	return w
}

type change int

const (
	etagOnly change = iota
	crdAdd
	crdRemove
	flap
)

func (c change) String() string {
	return [...]string{"etag-only", "crd-add", "crd-remove", "flap"}[c]
}

// step makes change k: every 20th a peer flaps (NotReady, then back at the
// next flap of that peer), four in 20 add or remove a CRD on every server,
// the rest change one server's document ETag.
func (w *workload) step(k int) change {
	switch k % 20 {
	case 0:
		p := &w.in.Peers[(k/20)%peers]
		// As a failed scrape does: NotReady, and its last good document
		// kept but marked stale (the merged discovery says so).
		p.Ready = !p.Ready
		p.Stale = !p.Ready
		p.ReadyReason = map[bool]string{true: "DiscoverySynced", false: "ConnectionRefused"}[p.Ready]
		p.ReadyTransition = t0.Add(time.Duration(k) * time.Second)
		return flap
	case 1, 3:
		name := fmt.Sprintf("crd%04d.example.com", w.next)
		w.next++
		w.crds = append(w.crds, name)
		g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
			Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "widgets", Scope: apidiscoveryv2.ScopeNamespace,
				Verbs: []string{"get", "list", "watch"}, ResponseKind: &metav1.GroupVersionKind{Group: name, Version: "v1", Kind: "Widget"}}},
		}}}
		for i := range w.in.Peers {
			w.in.Peers[i].APIs = append(slices.Clip(w.in.Peers[i].APIs), g)
		}
		w.in.ClusterWide[schema.GroupVersion{Group: name, Version: "v1"}] = compute.SourceCRD
		return crdAdd
	case 2, 4:
		if len(w.crds) == 0 {
			return w.etag(k)
		}
		name := w.crds[0]
		w.crds = w.crds[1:]
		for i := range w.in.Peers {
			w.in.Peers[i].APIs = slices.DeleteFunc(slices.Clone(w.in.Peers[i].APIs), func(g apidiscoveryv2.APIGroupDiscovery) bool { return g.Name == name })
		}
		delete(w.in.ClusterWide, schema.GroupVersion{Group: name, Version: "v1"})
		return crdRemove
	}
	return w.etag(k)
}

func (w *workload) etag(k int) change {
	w.in.Peers[k%peers].APIsETag = fmt.Sprintf(`"apis-%d"`, k)
	w.etagPeer = k % peers
	return etagOnly
}

// patchETag is the engine's output after an ETag-only change, without
// recomputing 25,000 GVRs: the peer's discoveryETag changes, nothing else.
// The test checks it against compute.Compute now and then.
func (w *workload) patchETag(prev registry.View) registry.View {
	next := prev
	next.Peers = slices.Clone(prev.Peers)
	id := w.in.Peers[w.etagPeer].ServerID
	for i := range next.Peers {
		if next.Peers[i].Spec.ServerID == id {
			p := next.Peers[i].DeepCopy()
			p.Status.DiscoveryETag = w.in.Peers[w.etagPeer].APIsETag
			next.Peers[i] = *p
		}
	}
	return next
}

// publishLog maps resourceVersions to when the change that made them was
// published, for fan-out latency.
type publishLog struct {
	mu     sync.RWMutex
	firsts []uint64 // the first RV after each publish started
	starts []time.Time
}

func (l *publishLog) add(firstRV uint64, at time.Time) {
	l.mu.Lock()
	l.firsts, l.starts = append(l.firsts, firstRV), append(l.starts, at)
	l.mu.Unlock()
}

func (l *publishLog) startOf(rv uint64) (time.Time, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	i := sort.Search(len(l.firsts), func(i int) bool { return l.firsts[i] > rv }) - 1
	if i < 0 {
		return time.Time{}, false
	}
	return l.starts[i], true
}

// histogram of latencies shared by all watchers: 8 buckets per doubling
// from 1 µs (each bucket's upper bound is at most 9% above its values).
type histogram [8 * 40]atomic.Uint64

func bucketOf(d time.Duration) int {
	if d <= time.Microsecond {
		return 0
	}
	return min(len(histogram{})-1, int(math.Ceil(8*math.Log2(float64(d)/float64(time.Microsecond)))))
}

func bucketUpper(i int) time.Duration {
	return time.Duration(float64(time.Microsecond) * math.Exp2(float64(i)/8))
}

func (h *histogram) quantile(q float64) time.Duration {
	var n uint64
	for i := range h {
		n += h[i].Load()
	}
	target := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i := range h {
		c := h[i].Load()
		seen += c
		if seen >= target && c > 0 {
			return bucketUpper(i).Round(100 * time.Microsecond)
		}
	}
	return 0
}

// liveWatcher applies what it receives on top of the shared initial list,
// encoding each object with the server's JSON codec as the watch handler
// would.
type liveWatcher struct {
	resource string
	w        watch.Interface
	codec    kruntime.Encoder
	log      *publishLog
	hist     *histogram

	mu      sync.Mutex
	changed map[string]string // name → RV, "" for deleted
	lastRV  uint64
	err     error
	// receipts, when not nil, records when each event arrived.
	receipts []receipt
}

type receipt struct {
	rv uint64
	at time.Time
}

func (lw *liveWatcher) run() {
	for e := range lw.w.ResultChan() {
		now := time.Now()
		if e.Type == watch.Error {
			lw.fail(fmt.Errorf("error event: %v", e.Object))
			return
		}
		if err := lw.codec.Encode(e.Object, io.Discard); err != nil {
			lw.fail(err)
			return
		}
		if e.Type == watch.Bookmark {
			// Bookmarks carry the clock, which all stores share: they tell
			// when a watcher has seen everything up to a list's RV.
			if m, err := meta.Accessor(e.Object); err == nil {
				var rv uint64
				fmt.Sscan(m.GetResourceVersion(), &rv)
				lw.mu.Lock()
				lw.lastRV = max(lw.lastRV, rv)
				lw.mu.Unlock()
			}
			continue
		}
		// The metadata only: a watcher copying a 2 MiB object per event
		// would measure itself, not the server.
		m, err := meta.Accessor(e.Object)
		if err != nil {
			lw.fail(err)
			return
		}
		var rv uint64
		fmt.Sscan(m.GetResourceVersion(), &rv)
		lw.mu.Lock()
		if e.Type == watch.Deleted {
			lw.changed[m.GetName()] = ""
		} else {
			lw.changed[m.GetName()] = m.GetResourceVersion()
		}
		lw.lastRV = rv
		if lw.receipts != nil {
			lw.receipts = append(lw.receipts, receipt{rv, now})
		} else if start, ok := lw.log.startOf(rv); ok {
			lw.hist[bucketOf(now.Sub(start))].Add(1)
		}
		lw.mu.Unlock()
	}
	lw.fail(fmt.Errorf("watch closed"))
}

// waitFor waits up to 30 s, polling every poll, until the watcher has
// seen resourceVersion rv (0: nothing to wait for).
func (lw *liveWatcher) waitFor(t *testing.T, rv uint64, poll time.Duration) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lw.mu.Lock()
		caught, last, err := lw.lastRV >= rv || rv == 0, lw.lastRV, lw.err
		lw.mu.Unlock()
		if err != nil {
			t.Fatalf("%s watcher: %v", lw.resource, err)
		}
		if caught {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s watcher at %d, not caught up with %d", lw.resource, last, rv)
		}
		time.Sleep(poll)
	}
}

func (lw *liveWatcher) fail(err error) {
	lw.mu.Lock()
	if lw.err == nil {
		lw.err = err
	}
	lw.mu.Unlock()
}

func heapObjectsBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func listState(t *testing.T, st rest.Storage) (map[string]string, uint64) {
	t.Helper()
	l, err := st.(rest.Lister).List(context.Background(), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		t.Fatal(err)
	}
	state := make(map[string]string, len(items))
	for _, o := range items {
		m, _ := meta.Accessor(o)
		state[m.GetName()] = m.GetResourceVersion()
	}
	la, _ := meta.ListAccessor(l)
	var rv uint64
	fmt.Sscan(la.GetResourceVersion(), &rv)
	return state, rv
}

func TestScale5Peers5000GVRs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	view := registry.NewViewStore(time.Hour, clocktesting.NewFakeClock(t0), false)
	defer view.Stop()
	storage := view.Storage()
	codec := apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)

	// Peak heap, sampled while everything runs.
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if h := heapObjectsBytes(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	w := newWorkload()
	computeView := func() registry.View {
		out, err := compute.Compute(w.in)
		if err != nil {
			t.Fatal(err)
		}
		return registry.View{Peers: out.Peers, Discovery: out.Discovery, Routes: out.Routes}
	}
	current := computeView()
	if err := view.Publish(current); err != nil {
		t.Fatal(err)
	}

	resources := []string{"peerroutingtables", "apiserverpeers", "peeraggregateddiscoveries"}
	initial := map[string]map[string]string{}
	log := &publishLog{}
	hist := &histogram{}
	var live []*liveWatcher
	for i := range liveWatchers {
		res := resources[i%len(resources)]
		if initial[res] == nil {
			initial[res], _ = listState(t, storage[res])
		}
		_, rv := listState(t, storage[res])
		wi, err := storage[res].(rest.Watcher).Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: fmt.Sprint(rv), AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		lw := &liveWatcher{resource: res, w: wi, codec: codec, log: log, hist: hist, changed: map[string]string{}}
		live = append(live, lw)
		go lw.run()
	}
	defer func() {
		for _, lw := range live {
			lw.w.Stop()
		}
	}()
	// The stalled watcher watches the largest object and never reads.
	_, padRV := listState(t, storage["peeraggregateddiscoveries"])
	stalled, err := storage["peeraggregateddiscoveries"].(rest.Watcher).Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: fmt.Sprint(padRV)})
	if err != nil {
		t.Fatal(err)
	}
	terminatedBefore := terminated(t, "peeraggregateddiscoveries.peerdiscovery.k8s.io")

	counts := map[change]int{}
	var maxFlapEvents uint64
	began := time.Now()
	for k := 1; k <= viewChanges; k++ {
		if ctx.Err() != nil {
			t.Fatalf("out of time after %d changes", k-1)
		}
		c := w.step(k)
		counts[c]++
		var next registry.View
		if c == etagOnly && os.Getenv("SCALE_FULL_COMPUTE") == "" {
			next = w.patchETag(current)
			if k%100 == 5 {
				if full := computeView(); !equality.Semantic.DeepEqual(full, next) {
					t.Fatalf("change %d: the patched ETag-only view differs from compute's", k)
				}
			}
		} else {
			next = computeView()
		}
		current = next
		before := view.Clock().Current()
		log.add(before+1, time.Now())
		if err := view.Publish(next); err != nil {
			t.Fatal(err)
		}
		if c == flap {
			maxFlapEvents = max(maxFlapEvents, view.Clock().Current()-before)
		}
	}
	elapsed := time.Since(began)

	// Every live watcher catches up and holds exactly the final state.
	for _, res := range resources {
		want, rv := listState(t, storage[res])
		for _, lw := range live {
			if lw.resource != res {
				continue
			}
			// Within two bookmark periods (10 s each).
			lw.waitFor(t, rv, 10*time.Millisecond)
			got := map[string]string{}
			for n, v := range initial[res] {
				got[n] = v
			}
			lw.mu.Lock()
			for n, v := range lw.changed {
				if v == "" {
					delete(got, n)
				} else {
					got[n] = v
				}
			}
			lw.mu.Unlock()
			if len(got) != len(want) {
				t.Fatalf("%s watcher holds %d objects, a list %d", res, len(got), len(want))
			}
			for n, v := range want {
				if got[n] != v {
					t.Fatalf("%s watcher: %s at %q, list at %q", res, n, got[n], v)
				}
			}
		}
	}

	// The acceptance's measure: fan-out of one change at a time, each
	// published once every live watcher has the previous one. The churn
	// above publishes back to back, so its latencies also hold the queue
	// behind earlier changes (reported, not bounded: they follow the
	// machine's speed).
	// Latency counts from the end of Publish: the diff of all stores is
	// compute (reported apart); fan-out is what follows it. An event a
	// watcher got before Publish returned counts as 0.
	one := &histogram{}
	for _, lw := range live {
		lw.mu.Lock()
		lw.receipts = []receipt{}
		lw.mu.Unlock()
	}
	oneChanges := 0
	var publishTimes []time.Duration
	var published []receipt // first RV of each change, end of its Publish
	for k := viewChanges + 1; oneChanges < isolatedChanges; k++ {
		if m := k % 20; m == 2 || m == 4 {
			// CRD removals delete objects: no object's resourceVersion
			// tells when a watcher has them all.
			continue
		}
		oneChanges++
		c := w.step(k)
		var next registry.View
		if c == etagOnly && os.Getenv("SCALE_FULL_COMPUTE") == "" {
			next = w.patchETag(current)
		} else {
			next = computeView()
		}
		current = next
		before := view.Clock().Current()
		pubStart := time.Now()
		log.add(before+1, pubStart)
		if err := view.Publish(next); err != nil {
			t.Fatal(err)
		}
		publishTimes = append(publishTimes, time.Since(pubStart))
		published = append(published, receipt{before + 1, time.Now()})
		for _, res := range resources {
			state, _ := listState(t, storage[res])
			var newest uint64
			for _, v := range state {
				var rv uint64
				fmt.Sscan(v, &rv)
				newest = max(newest, rv)
			}
			if newest <= before {
				continue
			}
			for _, lw := range live {
				if lw.resource != res {
					continue
				}
				lw.waitFor(t, newest, time.Millisecond)
			}
		}
	}

	for _, lw := range live {
		lw.mu.Lock()
		for _, r := range lw.receipts {
			i := sort.Search(len(published), func(i int) bool { return published[i].rv > r.rv }) - 1
			if i >= 0 {
				one[bucketOf(max(0, r.at.Sub(published[i].at)))].Add(1)
			}
		}
		lw.receipts = nil
		lw.mu.Unlock()
	}

	// The stalled watcher was ended, and what it held is freed.
	select {
	case _, ok := <-stalled.ResultChan():
		for ok {
			_, ok = <-stalled.ResultChan()
		}
	case <-time.After(time.Minute):
		t.Fatal("the stalled watcher was not ended")
	}
	terminatedDelta := terminated(t, "peeraggregateddiscoveries.peerdiscovery.k8s.io") - terminatedBefore
	close(stopSampling)
	<-sampled
	for _, lw := range live {
		lw.w.Stop()
	}
	runtime.GC()
	after := heapObjectsBytes()
	runtime.KeepAlive(stalled)

	p50, p99 := hist.quantile(0.50), hist.quantile(0.99)
	oneP50, oneP99 := one.quantile(0.50), one.quantile(0.99)
	slices.Sort(publishTimes)
	t.Logf("scale: Publish of one change (diff of all stores, events queued): p50 %v, max %v", publishTimes[len(publishTimes)/2], publishTimes[len(publishTimes)-1])
	t.Logf("scale: %d peers × %d GVRs, %d view changes %v in %v (%.1f ms each, compute included)",
		peers, gvrsPerPeer, viewChanges, counts, elapsed.Round(time.Millisecond), float64(elapsed.Milliseconds())/float64(viewChanges))
	t.Logf("scale: %d live watchers + 1 stalled: peak heap %.0f MiB (budget %d), heap after the run and a GC %.0f MiB",
		liveWatchers, float64(peak.Load())/(1<<20), heapBudget>>20, float64(after)/(1<<20))
	t.Logf("scale: fan-out of one change at a time to %d watchers, from the end of Publish, %d changes (histogram bounds, ±9%%): p50 ≤ %v, p99 ≤ %v (budget %v)", liveWatchers, isolatedChanges, oneP50, oneP99, fanoutP99Budget)
	t.Logf("scale: fan-out latency during the back-to-back churn, queueing behind earlier changes included: p50 ≤ %v, p99 ≤ %v", p50, p99)
	t.Logf("scale: events of one peer flap, all resources: at most %d (budget %d)", maxFlapEvents, flapEventBudget)
	if terminatedDelta < 1 {
		t.Error("the stalled watcher's termination was not counted")
	}
	if peak.Load() > heapBudget {
		t.Errorf("peak heap %d MiB over the %d MiB budget", peak.Load()>>20, heapBudget>>20)
	}
	if oneP99 > fanoutP99Budget {
		t.Errorf("fan-out p99 of one change %v over %v", oneP99, fanoutP99Budget)
	}
	if maxFlapEvents > flapEventBudget {
		t.Errorf("one flap made %d events, budget %d", maxFlapEvents, flapEventBudget)
	}
}

func terminated(t *testing.T, resource string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, f := range families {
		if f.GetName() != "peerdiscovery_store_terminated_watchers_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == resource {
					v += m.GetCounter().GetValue()
				}
			}
		}
	}
	return v
}
