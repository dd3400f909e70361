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

package scale

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime/metrics"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
)

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
			// Bookmarks carry the store's latest resourceVersion: they
			// tell when a watcher has seen everything up to a list's RV.
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
