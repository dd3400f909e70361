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
	"cmp"
	"slices"
	"time"
)

// Result is one run of the suite.
type Result struct {
	Scale   Scale     `json:"scale"`
	Started time.Time `json:"started"`
	// Commit is the checkout's HEAD (and whether it had changes).
	Commit string `json:"commit"`
	// LoadAvg is /proc/loadavg at the start and the end of each part:
	// the machine is shared.
	LoadAvg map[string]string        `json:"loadAvg"`
	Took    map[string]time.Duration `json:"took"`
	// Cores is how many CPUs the machine has: every plane, etcd and the
	// client share them.
	Cores int `json:"cores,omitempty"`

	List  *ListResult  `json:"list,omitempty"`
	Watch []WatchPhase `json:"watch,omitempty"`
	Load  []LoadStep   `json:"load,omitempty"`
	// LoadProfiles are CPU profiles of the proxied paths' servers at the
	// highest concurrency.
	LoadProfiles []CPUProfile `json:"loadProfiles,omitempty"`
	Cost         *CostResult  `json:"cost,omitempty"`

	// Heap is filled by hack/bench-report from the heap profiles, by
	// profile file; HeapDiff, per cost state and release, the functions
	// whose live heap (by allocating function) grew most from upstream's
	// servers to this filter's (means over the servers).
	Heap     map[string]HeapFigures `json:"heap,omitempty"`
	HeapDiff map[string][]HeapSite  `json:"heapDiff,omitempty"`
	// AllocDiff is HeapDiff for the allocations per second over the
	// steady window (Heap holds their figures too, by the AllocBase
	// file).
	AllocDiff map[string][]HeapSite `json:"allocDiff,omitempty"`
	// EarlyHeapDiff is HeapDiff at the early window's end (Heap holds
	// their figures too, by the EarlyHeapProfile file).
	EarlyHeapDiff map[string][]HeapSite `json:"earlyHeapDiff,omitempty"`
	// CPU is filled by hack/bench-report from the CPU profiles, by file.
	CPU map[string]CPUFigures `json:"cpu,omitempty"`
}

// CPUFigures are read from one CPU profile: the CPU time sampled, and its
// share by area (the innermost frame's: see hack/bench-report), and the
// time under the filter's functions.
type CPUFigures struct {
	Total  time.Duration            `json:"total"`
	Areas  map[string]time.Duration `json:"areas"`
	Filter time.Duration            `json:"filter"`
	Top    []HeapSite               `json:"top,omitempty"` // flat, by function; Bytes holds seconds
}

// Profiles are every CPU profile of the run.
func (r *Result) Profiles() []CPUProfile {
	var out []CPUProfile
	if r.List != nil {
		out = append(out, r.List.Profiles...)
	}
	for _, w := range r.Watch {
		out = append(out, w.Profiles...)
	}
	return append(out, r.LoadProfiles...)
}

// HeapFigures are read from one heap profile (after a GC).
type HeapFigures struct {
	// InUse is the live heap; Filter the part allocated with a function
	// of sigs.k8s.io/peerdiscovery on the stack (the filter is the only
	// peerdiscovery code in a kube-apiserver); Top its largest sites.
	InUse  float64    `json:"inUse"`
	Filter float64    `json:"filter"`
	Top    []HeapSite `json:"top,omitempty"`
	// Seconds is set on allocation figures (what a server allocated
	// between two heap profiles): the time between them. InUse, Filter
	// and Top's bytes are then per second.
	Seconds float64 `json:"seconds,omitempty"`
	// Resync is the part of InUse with a function of kube-apiserver's
	// periodic CRD resync work on the stack (ResyncFunctions).
	Resync float64 `json:"resync,omitempty"`
}

// ResyncFunctions prefix the functions that do the work every
// kube-apiserver repeats for every CRD at each 5-minute resync of
// apiextensions' CRD informer: the OpenAPI v3 controller rebuilds each
// CRD's spec and the discovery controller syncs each CRD's group. Both
// planes do it; the burst decides a short window's allocation by its
// phase.
var ResyncFunctions = []string{
	"k8s.io/apiextensions-apiserver/pkg/controller/openapiv3.",
	"k8s.io/apiextensions-apiserver/pkg/apiserver.(*DiscoveryController).",
}

// HeapSite is one function's share of the filter's part (flat, by the
// innermost peerdiscovery frame).
type HeapSite struct {
	Function string  `json:"function"`
	Bytes    float64 `json:"bytes"`
}

// Paths' names as the samples carry them.
const (
	PathDirect          = "peerdiscovery/direct"
	PathProxied         = "peerdiscovery/proxied"
	PathUpstreamDirect  = "upstream/direct"
	PathUpstreamProxied = "upstream/proxied"
)

// PathNames in report order.
var PathNames = []string{PathDirect, PathProxied, PathUpstreamDirect, PathUpstreamProxied}

// median of ds, the upper of the two middle values for an even count (0
// for none).
func median[T cmp.Ordered](ds []T) T {
	var zero T
	if len(ds) == 0 {
		return zero
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// ListFigures are one path's LISTs of one variant: medians over rounds.
type ListFigures struct {
	Took, FirstByte time.Duration
	// MBps is decoded bytes per second of the median LIST, in MB (1e6).
	MBps      float64
	Bytes     int64
	WireBytes int64
}

// ListSummary is, per variant and path, the medians.
func (r *ListResult) ListSummary() map[ListVariant]map[string]ListFigures {
	type acc struct {
		took, fb    []time.Duration
		bytes, wire int64
	}
	accs := map[ListVariant]map[string]*acc{}
	for _, s := range r.Samples {
		if accs[s.Variant] == nil {
			accs[s.Variant] = map[string]*acc{}
		}
		a := accs[s.Variant][s.Path]
		if a == nil {
			a = &acc{}
			accs[s.Variant][s.Path] = a
		}
		a.took, a.fb = append(a.took, s.Took), append(a.fb, s.FirstByte)
		a.bytes, a.wire = s.Bytes, s.WireBytes
	}
	out := map[ListVariant]map[string]ListFigures{}
	for v, paths := range accs {
		out[v] = map[string]ListFigures{}
		for p, a := range paths {
			f := ListFigures{Took: median(a.took), FirstByte: median(a.fb), Bytes: a.bytes, WireBytes: a.wire}
			if f.Took > 0 {
				f.MBps = float64(a.bytes) / 1e6 / f.Took.Seconds()
			}
			out[v][p] = f
		}
	}
	return out
}
