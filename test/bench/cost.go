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
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcessCost is one process over one window.
type ProcessCost struct {
	Routing   string `json:"routing"`
	Component string `json:"component"` // kube-apiserver-<i>, peerdiscovery-apiserver-0
	Version   string `json:"version,omitempty"`
	// RSS is the mean of one sample per second over the window.
	RSS float64 `json:"rss"`
	// EarlyRSS is the same over the early window, which starts the
	// scale's CostSettle after the state change; the window above starts
	// at CostSteadyAt, right after a GC forced on every server: RSS
	// follows the heap goal of a server's last GC and the garbage made
	// since, and a GC that landed during the change's allocation burst
	// kept a raised goal until the next.
	EarlyRSS float64       `json:"earlyRSS,omitempty"`
	CPU      time.Duration `json:"cpu"` // used over the window
	// HeapProfile is the file (in the output folder) of the heap profile
	// taken after the window, after a GC (kube-apiservers only).
	HeapProfile string `json:"heapProfile,omitempty"`
	// Allocated is what the Go runtime allocated per second over the
	// steady window, and GCs how many collections ran in it
	// (kube-apiservers only). RSS rises with the garbage made since the
	// last GC, so an idle server's allocation rate weighs on its RSS even
	// when its live heap does not grow.
	Allocated float64 `json:"allocated,omitempty"`
	GCs       int     `json:"gcs,omitempty"`
	// AllocBase is the file of the allocation profile taken, after a GC,
	// at the steady window's start (kube-apiservers only): what the server
	// allocated in the window is the difference of this and HeapProfile
	// (hack/bench-report), over the same stretch as Allocated. A profile
	// holds the allocations up to its process's last GC, so a delta
	// profile over a window in which an idle server ran no GC holds
	// nothing.
	AllocBase string `json:"allocBase,omitempty"`
	// Go is the Go runtime's memory at the window's end, before that GC
	// (kube-apiservers only): what of the RSS is heap in use, and what the
	// runtime holds idle without returning it to the OS.
	Go *GoMemory `json:"go,omitempty"`
	// EarlyGo is the same at the early window's end (no GC forced there):
	// whether the early RSS is heap in use, heap kept idle after the
	// change's burst, or a GC target the burst raised.
	EarlyGo *GoMemory `json:"earlyGo,omitempty"`
	// EarlyHeapProfile is the file of the heap profile taken after a GC
	// right after EarlyGo (kube-apiservers only): what is live in the
	// early window. The steady window starts with a GC of its own.
	EarlyHeapProfile string `json:"earlyHeapProfile,omitempty"`
}

// GoMemory is a process's go_memstats at one moment, in bytes.
type GoMemory struct {
	HeapInuse    float64 `json:"heapInuse"`
	HeapIdle     float64 `json:"heapIdle"`
	HeapReleased float64 `json:"heapReleased"`
	// NextGC is the heap size at which the next GC starts.
	NextGC float64 `json:"nextGC"`
	// AllocatedTotal is every byte allocated since the process started,
	// GCs every collection.
	AllocatedTotal float64 `json:"allocatedTotal"`
	GCs            float64 `json:"gcs"`
}

// CostState is every process of both planes in one state.
type CostState struct {
	Name     string `json:"name"`
	CRDs     int    `json:"crds"`
	StubGVRs int    `json:"stubGVRs"`
	// Window is the early window's length, SteadyWindow the steady one's
	// (zero in results from before it had its own: Window then).
	Window       time.Duration `json:"window"`
	SteadyWindow time.Duration `json:"steadyWindow,omitempty"`
	// Quiet is when each plane settled before the settle time began.
	Quiet     []PlaneQuiet  `json:"quiet,omitempty"`
	Processes []ProcessCost `json:"processes"`
	// Leases are each plane's Lease writes by class over the steady
	// window.
	Leases []LeaseWrites `json:"leases,omitempty"`
}

// Steady is the steady window's length.
func (st CostState) Steady() time.Duration {
	if st.SteadyWindow > 0 {
		return st.SteadyWindow
	}
	return st.Window
}

// CostResult is the filter's own cost.
type CostResult struct {
	Servers    []string `json:"servers"`
	GVRsWanted int      `json:"gvrsWanted"`
	CRDsWanted int      `json:"crdsWanted"`
	CRDs       int      `json:"crds"`
	CRDsNote   string   `json:"crdsNote,omitempty"` // why fewer were made
	// StubGVRs are the aggregated APIServices' resources added after.
	StubGVRs int           `json:"stubGVRs"`
	CRDsTook time.Duration `json:"crdsTook"`
	StubTook time.Duration `json:"stubTook"`
	// Settle is the time after both planes were quiet and before each
	// state's window.
	Settle time.Duration `json:"settle"`
	// SteadyAt is when the steady window starts after that.
	SteadyAt time.Duration `json:"steadyAt"`
	States   []CostState   `json:"states"`
}

// MeasureCost samples every kube-apiserver (and peerdiscovery-apiserver)
// of both planes at once over two windows, the early one (CostWindow)
// CostSettle after quiet (when both planes were quiet after the state
// change) and the steady one (steady long) CostSteadyAt after it, and
// takes each kube-apiserver's heap profile after a GC into dir at the
// early window's end and the steady window's start and end.
func MeasureCost(ctx context.Context, planes []*Plane, s Scale, name string, crds, stubGVRs int, quiet time.Time, steady time.Duration, dir string) (CostState, error) {
	st := CostState{Name: name, CRDs: crds, StubGVRs: stubGVRs, Window: s.CostWindow, SteadyWindow: steady}
	type proc struct {
		cost ProcessCost
		pid  int
		cpu0 time.Duration
		rss  *sampler
	}
	var procs []*proc
	for _, pl := range planes {
		for i, srv := range pl.C.Servers() {
			pid, err := pl.C.ServerPID(i)
			if err != nil || pid == 0 {
				return st, fmt.Errorf("%s %s is not running", pl.Routing, srv.Name)
			}
			procs = append(procs, &proc{cost: ProcessCost{Routing: pl.Routing.String(), Component: srv.Name, Version: srv.Version}, pid: pid})
		}
		for i, e := range pl.C.Extensions() {
			pid, err := pl.C.ExtensionPID(i)
			if err != nil || pid == 0 {
				return st, fmt.Errorf("%s %s is not running", pl.Routing, e.Name)
			}
			procs = append(procs, &proc{cost: ProcessCost{Routing: pl.Routing.String(), Component: e.Name}, pid: pid})
		}
	}
	// The early window: RSS only.
	for _, p := range procs {
		p.rss = startSampler(time.Second, func() (float64, error) { return rssBytes(p.pid) })
	}
	select {
	case <-ctx.Done():
	case <-time.After(s.CostWindow):
	}
	for _, p := range procs {
		_, p.cost.EarlyRSS = p.rss.end()
	}
	servers := procsOfServers(procs, planes)
	earlyMem, err := serversGoMemory(ctx, planes)
	if err != nil {
		return st, err
	}
	for k, p := range servers {
		p.cost.EarlyGo = earlyMem[k]
	}
	if err := saveHeapProfiles(ctx, planes, dir, func(k int) (*string, string) {
		p := servers[k]
		return &p.cost.EarlyHeapProfile, fmt.Sprintf("heap-early-%s-%s-%s.pb.gz", name, p.cost.Routing, p.cost.Component)
	}); err != nil {
		return st, err
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(quiet.Add(s.CostSteadyAt))):
	}
	// Every kube-apiserver of both planes collects here, one after another
	// within seconds (the profile's gc=1): the steady window then starts
	// right after a GC on every server, where before each server's last
	// GC fell where its allocations and the 2-minute forced GC put it, and
	// that phase moved a server's mean RSS by tens of MiB.
	if err := saveHeapProfiles(ctx, planes, dir, func(k int) (*string, string) {
		p := servers[k]
		return &p.cost.AllocBase, fmt.Sprintf("allocs-%s-%s-%s.pb.gz", name, p.cost.Routing, p.cost.Component)
	}); err != nil {
		return st, err
	}
	for _, p := range procs {
		p.cpu0, _ = cpuTime(p.pid)
		p.rss = startSampler(time.Second, func() (float64, error) { return rssBytes(p.pid) })
	}
	memStart, err := serversGoMemory(ctx, planes)
	if err != nil {
		return st, err
	}
	var leaseWatches []*leaseWatch
	for _, pl := range planes {
		w, err := startLeaseWatch(ctx, pl)
		if err != nil {
			return st, err
		}
		leaseWatches = append(leaseWatches, w)
	}
	select {
	case <-ctx.Done():
	case <-time.After(steady):
	}
	for _, p := range procs {
		cpu1, err := cpuTime(p.pid)
		if err != nil {
			return st, fmt.Errorf("%s %s: %w", p.cost.Routing, p.cost.Component, err)
		}
		p.cost.CPU = cpu1 - p.cpu0
		_, p.cost.RSS = p.rss.end()
	}
	for _, w := range leaseWatches {
		writes, err := w.done()
		if err != nil {
			return st, err
		}
		st.Leases = append(st.Leases, writes...)
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	// The runtime's memory first, then the profiles: the GC each profile
	// forces would show in both.
	memEnd, err := serversGoMemory(ctx, planes)
	if err != nil {
		return st, err
	}
	for k, p := range servers {
		p.cost.Go = memEnd[k]
		p.cost.Allocated = (memEnd[k].AllocatedTotal - memStart[k].AllocatedTotal) / steady.Seconds()
		p.cost.GCs = int(memEnd[k].GCs - memStart[k].GCs)
	}
	if err := saveHeapProfiles(ctx, planes, dir, func(k int) (*string, string) {
		p := servers[k]
		return &p.cost.HeapProfile, fmt.Sprintf("heap-%s-%s-%s.pb.gz", name, p.cost.Routing, p.cost.Component)
	}); err != nil {
		return st, err
	}
	for _, p := range procs {
		st.Processes = append(st.Processes, p.cost)
	}
	return st, nil
}

// forEachServer calls f for every kube-apiserver of every plane, k
// counting them across the planes in MeasureCost's order.
func forEachServer(planes []*Plane, f func(k int, pl *Plane, i int)) {
	k := 0
	for _, pl := range planes {
		for i := range pl.C.Servers() {
			f(k, pl, i)
			k++
		}
	}
}

// saveHeapProfiles saves every kube-apiserver's heap profile, taken after
// a GC, one server after another, into dir; fileOf names the k-th
// server's file and where to record it.
func saveHeapProfiles(ctx context.Context, planes []*Plane, dir string, fileOf func(k int) (*string, string)) error {
	var failed error
	forEachServer(planes, func(k int, pl *Plane, i int) {
		field, file := fileOf(k)
		if err := heapProfile(ctx, pl, i, filepath.Join(dir, file)); err != nil && failed == nil {
			failed = err
		}
		*field = file
	})
	return failed
}

// procsOfServers are the kube-apiservers among procs (which list each
// plane's servers, then its extension replicas), in forEachServer's order.
func procsOfServers[P any](procs []P, planes []*Plane) []P {
	var out []P
	k := 0
	for _, pl := range planes {
		out = append(out, procs[k:k+len(pl.C.Servers())]...)
		k += len(pl.C.Servers()) + len(pl.C.Extensions())
	}
	return out
}

// serversGoMemory reads every kube-apiserver's go_memstats, in
// forEachServer's order.
func serversGoMemory(ctx context.Context, planes []*Plane) ([]*GoMemory, error) {
	var out []*GoMemory
	var failed error
	forEachServer(planes, func(_ int, pl *Plane, i int) {
		m, err := goMemory(ctx, pl, i)
		if err != nil && failed == nil {
			failed = err
		}
		out = append(out, m)
	})
	return out, failed
}

// goMemory reads kube-apiserver i's go_memstats from /metrics.
func goMemory(ctx context.Context, pl *Plane, i int) (*GoMemory, error) {
	cfg := pl.C.AdminConfig(i)
	client, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	body, err := do(ctx, client, http.MethodGet, url(cfg, "/metrics"), nil, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("%s server %d metrics: %w", pl.Routing, i, err)
	}
	m := &GoMemory{}
	want := map[string]*float64{
		"go_memstats_heap_inuse_bytes":    &m.HeapInuse,
		"go_memstats_heap_idle_bytes":     &m.HeapIdle,
		"go_memstats_heap_released_bytes": &m.HeapReleased,
		"go_memstats_next_gc_bytes":       &m.NextGC,
		"go_memstats_alloc_bytes_total":   &m.AllocatedTotal,
		"go_gc_duration_seconds_count":    &m.GCs,
	}
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if dst := want[name]; ok && dst != nil {
			if *dst, err = strconv.ParseFloat(value, 64); err != nil {
				return nil, fmt.Errorf("%s server %d metrics: %s: %w", pl.Routing, i, name, err)
			}
			delete(want, name)
		}
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("%s server %d metrics: %d go_memstats series missing", pl.Routing, i, len(want))
	}
	return m, nil
}

// heapProfile saves kube-apiserver i's heap profile, taken after a GC
// (--profiling is on by default).
func heapProfile(ctx context.Context, pl *Plane, i int, path string) error {
	cfg := pl.C.AdminConfig(i)
	client, err := httpClient(cfg)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	body, err := do(ctx, client, http.MethodGet, url(cfg, "/debug/pprof/heap?gc=1"), nil, http.StatusOK)
	if err != nil {
		return fmt.Errorf("%s server %d heap profile: %w", pl.Routing, i, err)
	}
	return os.WriteFile(path, body, 0o644)
}
