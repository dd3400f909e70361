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

package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// The figures the report's goals are judged by, computed from samples
// without a plane.

func TestMaxRPS(t *testing.T) {
	ms := time.Millisecond
	steps := []LoadStep{
		{Path: PathDirect, Concurrency: 1, Round: 0, RPS: 400, P99: 5 * ms},
		{Path: PathDirect, Concurrency: 8, Round: 0, RPS: 2000, P99: 40 * ms},
		{Path: PathDirect, Concurrency: 8, Round: 1, RPS: 1800, P99: 50 * ms},   // the lower round counts
		{Path: PathDirect, Concurrency: 64, Round: 0, RPS: 2500, P99: 150 * ms}, // over the bound
		{Path: PathProxied, Concurrency: 8, Round: 0, RPS: 1500, P99: 30 * ms},
		{Path: PathProxied, Concurrency: 8, Round: 1, RPS: 1600, P99: 120 * ms}, // a bad round sinks the step
		{Path: PathProxied, Concurrency: 1, Round: 0, RPS: 300, P99: 6 * ms},
		{Path: PathProxied, Concurrency: 16, Round: 0, RPS: 1700, P99: 20 * ms, Errors: 1}, // errors disqualify
		{Path: PathUpstreamProxied, Concurrency: 1, Round: 0, RPS: 100, P99: 200 * ms},
	}
	got := MaxRPS(steps, LoadP99Bound)
	want := map[string]float64{PathDirect: 1800, PathProxied: 300, PathUpstreamProxied: 0}
	if len(got) != len(want) {
		t.Fatalf("MaxRPS = %v, want %v", got, want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("MaxRPS[%s] = %v, want %v", p, got[p], w)
		}
	}
}

func TestLoadCPUPerRequest(t *testing.T) {
	ms := time.Millisecond
	steps := []LoadStep{
		// Two rounds at the top concurrency add up: 3,000 requests.
		{Path: PathDirect, Concurrency: 64, Round: 0, Requests: 1000, CPU: &StepCPU{Source: 400 * ms, Etcd: 200 * ms, Client: 400 * ms}},
		{Path: PathDirect, Concurrency: 64, Round: 1, Requests: 2000, CPU: &StepCPU{Source: 800 * ms, Etcd: 400 * ms, Client: 800 * ms}},
		{Path: PathProxied, Concurrency: 64, Round: 0, Requests: 1000, CPU: &StepCPU{Source: 500 * ms, Peer: 400 * ms, Etcd: 200 * ms, Client: 400 * ms}},
		// A lower concurrency does not count.
		{Path: PathProxied, Concurrency: 8, Round: 0, Requests: 10, CPU: &StepCPU{Source: time.Second}},
	}
	var b strings.Builder
	loadCPUTable(&b, steps, 2)
	for _, want := range []string{
		"| peerdiscovery/direct | 0.400 | 0.000 | 0.200 | 0.400 | 1.000 | 1.00× | 2000 |",
		"| peerdiscovery/proxied | 0.500 | 0.400 | 0.200 | 0.400 | 1.500 | 1.50× | 1333 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "upstream/") {
		t.Errorf("a path without CPU times has a row:\n%s", b.String())
	}
}

func TestWatchCPUPerDelivery(t *testing.T) {
	s := time.Second
	direct := WatchPhase{Path: PathDirect, Watchers: 1000, Acked: 4000, SourceCPU: 80 * s, PeerCPU: 80 * s}
	proxied := WatchPhase{Path: PathProxied, Watchers: 1000, Acked: 3000, Missing: 1000, SourceCPU: 40 * s, PeerCPU: 50 * s}
	for _, c := range []struct {
		w    WatchPhase
		want string
	}{
		{direct, "20.0"},                    // one server, counted once
		{proxied, "30.0"},                   // both servers, over delivered events only
		{WatchPhase{Path: PathDirect}, "–"}, // nothing delivered
	} {
		if got := c.w.cpuPerDelivery(); got != c.want {
			t.Errorf("%s: cpuPerDelivery = %s, want %s", c.w.Path, got, c.want)
		}
	}
}

func TestListSummaryAndGoal(t *testing.T) {
	v := ListVariant{Limit: 500}
	var samples []ListSample
	for i, took := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		samples = append(samples,
			ListSample{Path: PathDirect, Variant: v, Round: i, Took: took / 2, Bytes: 10e6},
			ListSample{Path: PathProxied, Variant: v, Round: i, Took: took, Bytes: 10e6},
			ListSample{Path: PathUpstreamDirect, Variant: v, Round: i, Took: took / 2, Bytes: 10e6},
			ListSample{Path: PathUpstreamProxied, Variant: v, Round: i, Took: took / 2, Bytes: 10e6})
	}
	r := &ListResult{Samples: samples}
	sum := r.ListSummary()
	d, p := sum[v][PathDirect], sum[v][PathProxied]
	if d.Took != time.Second || p.Took != 2*time.Second {
		t.Fatalf("medians: direct %s, proxied %s; want 1s and 2s", d.Took, p.Took)
	}
	if d.MBps != 10 || p.MBps != 5 {
		t.Fatalf("MB/s: direct %v, proxied %v; want 10 and 5", d.MBps, p.MBps)
	}
	var b strings.Builder
	goals(&b, &Result{List: r})
	if !strings.Contains(b.String(), "0.50× (json limit=500)") || !strings.Contains(b.String(), "**missed**") {
		t.Errorf("a proxied LIST at half direct's throughput is not reported as missed:\n%s", b.String())
	}
}

func TestPaddingCompressesLikeAnObject(t *testing.T) {
	const n = 1 << 10
	a, b := padding("a", n), padding("b", n)
	if len(a) != n || a != padding("a", n) || a == b {
		t.Fatalf("padding is not n bytes, not deterministic or not per name: %d bytes", len(a))
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, _ = w.Write([]byte(a))
	_ = w.Close()
	// Hex digits gzip to about half; a repeated character to a few bytes.
	if z.Len() < n/3 {
		t.Errorf("%d bytes of padding gzip to %d: more compressible than any real object", n, z.Len())
	}
}

func TestParseListJSON(t *testing.T) {
	n, cont, err := parseList([]byte(`{"kind":"StorageVersionMigrationList","metadata":{"continue":"abc"},"items":[{},{},{}]}`), false)
	if err != nil || n != 3 || cont != "abc" {
		t.Fatalf("parseList = %d, %q, %v; want 3, abc", n, cont, err)
	}
	if _, _, err := parseList([]byte(`{"items":[`), false); err == nil {
		t.Error("a cut LIST parsed without an error")
	}
}

func TestCountLeaseWrites(t *testing.T) {
	lease := func(name, label, value string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", ResourceVersion: name, Labels: map[string]string{label: value}}}
	}
	reg := lease("1", peerlease.RegistrationLabel, peerlease.RegistrationComponent)
	served := lease("2", peerlease.RegistrationLabel, peerlease.ServedComponent)
	served.Annotations = map[string]string{peerlease.ServedResourcesAnnotation: strings.Repeat("x", 1000)}
	identity := lease("3", peerlease.IdentityLabel, peerlease.IdentityComponent)
	other := lease("4", "app", "kube-scheduler")

	fw := watch.NewFake()
	go func() {
		fw.Modify(reg)
		fw.Modify(reg)
		fw.Add(served)
		fw.Modify(identity)
		fw.Modify(other)
		fw.Action(watch.Bookmark, lease("5", "", ""))
		fw.Stop()
	}()
	writes := map[string]*LeaseWrites{}
	rv, err := countLeaseWrites(context.Background(), fw, writes, "peerdiscovery")
	if err != nil || rv != "5" {
		t.Fatalf("countLeaseWrites: rv %q, %v", rv, err)
	}
	size := func(l *coordinationv1.Lease) int64 {
		n, err := storedSize(l)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if size(served) < 1000 || size(reg) >= size(served) {
		t.Fatalf("sizes: registration %d, served record %d", size(reg), size(served))
	}
	want := map[string]LeaseWrites{
		LeaseRegistration: {Events: 2, Bytes: 2 * size(reg)},
		LeaseServedRecord: {Events: 1, Bytes: size(served)},
		LeaseIdentity:     {Events: 1, Bytes: size(identity)},
	}
	if len(writes) != len(want) {
		t.Fatalf("classes %v, want %v", writes, want)
	}
	for class, w := range want {
		if got := writes[class]; got == nil || got.Events != w.Events || got.Bytes != w.Bytes {
			t.Errorf("%s: %+v, want %+v", class, got, w)
		}
	}
}

func TestRegistrationWritesGoal(t *testing.T) {
	w := 100 * time.Second
	st := CostState{Name: "gvrs", Leases: []LeaseWrites{
		{Routing: "peerdiscovery", Class: LeaseRegistration, Events: 160, Bytes: 160_000, Window: w},
		{Routing: "peerdiscovery", Class: LeaseServedRecord, Events: 1, Bytes: 5_000, Window: w},
		{Routing: "peerdiscovery", Class: LeaseIdentity, Events: 50, Bytes: 40_000, Window: w}, // not registration's
		{Routing: "upstream", Class: LeaseIdentity, Events: 50, Bytes: 40_000, Window: w},
	}}
	ours, up, ok := registrationWrites(st)
	if !ok || ours.Bytes != 165_000 || ours.Events != 161 || up.Bytes != 40_000 {
		t.Fatalf("registrationWrites: ours %+v, upstream %+v, %t", ours, up, ok)
	}
	r := &Result{Cost: &CostResult{States: []CostState{st}}}
	var b strings.Builder
	goals(&b, r)
	if !strings.Contains(b.String(), "1650 B/s (1.6 writes/s): 4.12× | 400 B/s (0.5 writes/s) | **missed**") {
		t.Fatalf("the goal's row:\n%s", b.String())
	}
}

func TestMedianMarkdown(t *testing.T) {
	run := func(rssAdded float64, hour int) *Result {
		mb := float64(1 << 20)
		return &Result{Started: time.Date(2026, 12, 6, hour, 0, 0, 0, time.UTC), Cost: &CostResult{States: []CostState{{Name: "gvrs", Processes: []ProcessCost{
			{Routing: "peerdiscovery", Version: "v1.37.2", RSS: (800 + rssAdded) * mb, Allocated: 1.1 * mb, Go: &GoMemory{}},
			{Routing: "upstream", Version: "v1.37.2", RSS: 800 * mb, Allocated: mb, Go: &GoMemory{}},
		}}}}}
	}
	got := MedianMarkdown([]*Result{run(40, 13), run(10, 14), run(30, 15)})
	for _, want := range []string{
		"| RSS added, v1.37.2 (MiB, steady) | 40.00 | 10.00 | 30.00 | 30.00 | ≤ 32.00 | met |",
		"| allocation rate, v1.37.2 (× upstream's) | 1.10 | 1.10 | 1.10 | 1.10 | ≤ 1.20 | met |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no row %q in\n%s", want, got)
		}
	}
	if got := MedianMarkdown([]*Result{run(40, 13), run(33, 14), run(10, 15)}); !strings.Contains(got, "| 33.00 | ≤ 32.00 | **missed** |") {
		t.Errorf("a median of 33 MiB:\n%s", got)
	}
	if median([]float64{4, 1, 3, 2}) != 3 {
		t.Error("median of an even count: the upper middle value")
	}
}

// TestGoMemoryTableEarlyWindow: the early window's table gives the Go
// memory before the GC and the profile's live heap after it, filter against
// upstream, and "–" for a profile hack/bench-report did not read.
func TestGoMemoryTableEarlyWindow(t *testing.T) {
	const mb = 1 << 20
	proc := func(routing string, inuse, target float64, profile string) ProcessCost {
		return ProcessCost{Routing: routing, Component: "kube-apiserver-0", Version: OldVersion,
			EarlyGo: &GoMemory{HeapInuse: inuse * mb, NextGC: target * mb}, EarlyHeapProfile: profile}
	}
	c := &CostResult{States: []CostState{{Name: "gvrs", Processes: []ProcessCost{
		proc("peerdiscovery", 700, 830, "ours.pb.gz"), proc("upstream", 480, 600, "theirs.pb.gz"),
	}}}}
	early := func(p ProcessCost) (*GoMemory, string) { return p.EarlyGo, p.EarlyHeapProfile }
	var b strings.Builder
	goMemoryTable(&b, c, map[string]HeapFigures{"ours.pb.gz": {InUse: 306 * mb}, "theirs.pb.gz": {InUse: 297 * mb}}, "at the early window's end (", early)
	if want := "| gvrs | " + OldVersion + " | 700 | 480 | +220 | 0 | 0 | +0 | 830 | 600 | +230 | 306 | 297 | +9 |"; !strings.Contains(b.String(), want) {
		t.Errorf("table:\n%s\nwant the row %q", b.String(), want)
	}
	b.Reset()
	goMemoryTable(&b, c, nil, "at the early window's end (", early)
	if want := "| +230 | – | – | |"; !strings.Contains(b.String(), want) {
		t.Errorf("table without profiles:\n%s\nwant the row to end %q", b.String(), want)
	}
	b.Reset()
	goMemoryTable(&b, c, nil, "at the window's end (", func(p ProcessCost) (*GoMemory, string) { return p.Go, p.HeapProfile })
	if b.Len() != 0 {
		t.Errorf("a table with no Go memory read: %q, want nothing", b.String())
	}
}
