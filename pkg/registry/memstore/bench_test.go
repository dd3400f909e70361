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

package memstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

var routeResource = schema.GroupResource{Group: "peerdiscovery.k8s.io", Resource: "peerroutingtables"}

func newRouteStore(tb testing.TB) *Store {
	s := New(Config{
		Resource:    routeResource,
		NewFunc:     func() kruntime.Object { return &RouteTable{} },
		NewListFunc: func() kruntime.Object { return &RouteTableList{} },
	})
	tb.Cleanup(s.Stop)
	return s
}

// routeTables builds n routing tables with 5 peers each; variant changes
// table 0 only, so consecutive variants differ by one object.
func routeTables(n, variant int) []kruntime.Object {
	out := make([]kruntime.Object, n)
	for i := range out {
		group := fmt.Sprintf("group%04d.example.com", i/10)
		rt := &RouteTable{
			Group:    group,
			Version:  fmt.Sprintf("v%d", i%10),
			Resource: fmt.Sprintf("resources%04d", i),
			Kind:     fmt.Sprintf("Resource%04d", i),
			Scope:    "Namespaced",
			Reason:   "ServedByAllPeers",
		}
		rt.Name = fmt.Sprintf("v%d.resources%04d.%s", i%10, i, group)
		rt.Labels = map[string]string{"peerdiscovery.k8s.io/group": group}
		for p := 0; p < 5; p++ {
			rt.Peers = append(rt.Peers, RoutePeer{
				ID:       fmt.Sprintf("kube-apiserver-%d-6f1c0a2e9b", p),
				Endpoint: fmt.Sprintf("10.0.0.%d:6443", p+10),
				Ready:    true,
			})
		}
		if i == 0 {
			rt.Reason = fmt.Sprintf("variant-%d", variant)
		}
		out[i] = rt
	}
	return out
}

func BenchmarkList5000(b *testing.B) {
	s := newRouteStore(b)
	mustReplace(b, s, routeTables(5000, 0))
	ctx := context.Background()
	opts := &metainternalversion.ListOptions{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := s.List(ctx, opts)
		if err != nil || len(l.(*RouteTableList).Items) != 5000 {
			b.Fatalf("%v", err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	s := newRouteStore(b)
	objs := routeTables(5000, 0)
	mustReplace(b, s, objs)
	name := objs[2500].(*RouteTable).Name
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Get(ctx, name, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplace5000OneChange is the compute layer's steady state: the
// full desired set with one object changed (diff + one event).
func BenchmarkReplace5000OneChange(b *testing.B) {
	s := newRouteStore(b)
	sets := [2][]kruntime.Object{routeTables(5000, 0), routeTables(5000, 1)}
	mustReplace(b, s, sets[0])
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mustReplace(b, s, sets[(i+1)%2])
	}
}

// BenchmarkFanout1000Watchers measures one Replace (5,000 tables, one
// changed) until the last of 1,000 watchers has received the change.
func BenchmarkFanout1000Watchers(b *testing.B) { benchmarkFanout(b, 1000, 5000) }

// BenchmarkFanout1000WatchersDeliveryOnly is the same with a one-object
// store, which isolates delivery from the 5,000-object diff.
func BenchmarkFanout1000WatchersDeliveryOnly(b *testing.B) { benchmarkFanout(b, 1000, 1) }

func benchmarkFanout(b *testing.B, watchers, objects int) {
	s := newRouteStore(b)
	sets := [2][]kruntime.Object{routeTables(objects, 0), routeTables(objects, 1)}
	mustReplace(b, s, sets[0])

	var received sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ws []watch.Interface
	for i := 0; i < watchers; i++ {
		w, err := s.Watch(ctx, &metainternalversion.ListOptions{SendInitialEvents: new(bool)})
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
		go func() {
			for e := range w.ResultChan() {
				if e.Type == watch.Modified {
					received.Done()
				}
			}
		}()
	}
	var worst time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		received.Add(watchers)
		start := time.Now()
		mustReplace(b, s, sets[(i+1)%2])
		received.Wait()
		worst = max(worst, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
	for _, w := range ws {
		w.Stop()
	}
}

// BenchmarkMemory5000 reports the heap a store holds for 5,000 tables of 5
// peers each (steady state after one-object changes, history included).
func BenchmarkMemory5000(b *testing.B) {
	var held float64
	for i := 0; i < b.N; i++ {
		held = float64(storeHeap(b))
	}
	b.ReportMetric(held, "heap-bytes")
	b.ReportMetric(held/(1<<20), "heap-MiB")
}

// storeHeap measures the heap retained by a populated store. The inputs
// are built and dropped inside fill, so only what the store keeps counts.
func storeHeap(tb testing.TB) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Config{
		Resource:    routeResource,
		NewFunc:     func() kruntime.Object { return &RouteTable{} },
		NewListFunc: func() kruntime.Object { return &RouteTableList{} },
	})
	fill := func() {
		mustReplace(tb, s, routeTables(5000, 0))
		for v := 1; v <= 10; v++ {
			mustReplace(tb, s, routeTables(5000, v))
		}
	}
	fill()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := len(s.items)
	s.Stop()
	runtime.KeepAlive(s)
	if n != 5000 {
		tb.Fatalf("%d items", n)
	}
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// TestMemory5000UnderBudget keeps the memory target checked by go test.
func TestMemory5000UnderBudget(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("heap measurement: slow and skewed under -race or -short")
	}
	const budget = 64 << 20
	if held := storeHeap(t); held > budget {
		t.Fatalf("store of 5,000 routing tables holds %d bytes, budget %d", held, budget)
	} else {
		t.Logf("store of 5,000 routing tables holds %.1f MiB", float64(held)/(1<<20))
	}
}
