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

// Package scale checks the extension server's memory and watch fan-out at
// the scale the project states (5 peers × 5,000 GVRs), on the real registry
// path: the engine's compute, the registry's Publisher, the REST storage, and
// watchers that encode what they receive with the server's codec, as the
// watch handler does. It runs without the race detector (which multiplies
// memory and time), in its own step of hack/test.sh.
package scale

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/apiserver"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
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

func TestScale5Peers5000GVRs(t *testing.T) {
	if raceEnabled {
		// Not a build tag: go vet -race ./... vets this package then.
		t.Skip("memory and time at scale: hack/test.sh runs this without the race detector")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stores := registry.NewStores()
	defer stores.Stop()
	view := registry.NewPublisher(stores, clocktesting.NewFakeClock(t0))
	storage := registry.Storage(stores, view)
	// Each store has its own resourceVersions: latencies are measured per
	// resource, against that store's.
	byResource := map[string]*memstore.Store{"peerroutingtables": stores.Routes, "apiserverpeers": stores.Peers, "peeraggregateddiscoveries": stores.Discovery}
	rvs := func() map[string]uint64 {
		m := map[string]uint64{}
		for res, s := range byResource {
			m[res] = s.ResourceVersion()
		}
		return m
	}
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
	computeView := func() compute.Output {
		out, err := compute.Compute(w.in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	current := computeView()
	if err := view.Publish(current); err != nil {
		t.Fatal(err)
	}

	resources := []string{"peerroutingtables", "apiserverpeers", "peeraggregateddiscoveries"}
	initial := map[string]map[string]string{}
	logs := map[string]*publishLog{}
	for _, res := range resources {
		logs[res] = &publishLog{}
	}
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
		lw := &liveWatcher{resource: res, w: wi, codec: codec, log: logs[res], hist: hist, changed: map[string]string{}}
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
		var next compute.Output
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
		before := rvs()
		for res, rv := range before {
			logs[res].add(rv+1, time.Now())
		}
		if err := view.Publish(next); err != nil {
			t.Fatal(err)
		}
		if c == flap {
			var events uint64
			for res, rv := range rvs() {
				events += rv - before[res]
			}
			maxFlapEvents = max(maxFlapEvents, events)
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
	published := map[string][]receipt{} // per resource: first RV of each change, end of its Publish
	for k := viewChanges + 1; oneChanges < isolatedChanges; k++ {
		if m := k % 20; m == 2 || m == 4 {
			// CRD removals delete objects: no object's resourceVersion
			// tells when a watcher has them all.
			continue
		}
		oneChanges++
		c := w.step(k)
		var next compute.Output
		if c == etagOnly && os.Getenv("SCALE_FULL_COMPUTE") == "" {
			next = w.patchETag(current)
		} else {
			next = computeView()
		}
		current = next
		before := rvs()
		pubStart := time.Now()
		for res, rv := range before {
			logs[res].add(rv+1, pubStart)
		}
		if err := view.Publish(next); err != nil {
			t.Fatal(err)
		}
		publishTimes = append(publishTimes, time.Since(pubStart))
		for res, rv := range before {
			published[res] = append(published[res], receipt{rv + 1, time.Now()})
		}
		for _, res := range resources {
			state, _ := listState(t, storage[res])
			var newest uint64
			for _, v := range state {
				var rv uint64
				fmt.Sscan(v, &rv)
				newest = max(newest, rv)
			}
			if newest <= before[res] {
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
		pub := published[lw.resource]
		for _, r := range lw.receipts {
			i := sort.Search(len(pub), func(i int) bool { return pub[i].rv > r.rv }) - 1
			if i >= 0 {
				one[bucketOf(max(0, r.at.Sub(pub[i].at)))].Add(1)
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
