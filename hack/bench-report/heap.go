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

package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"sigs.k8s.io/peerdiscovery/test/bench"
)

// ownPrefix names the project's functions: in a kube-apiserver, only the
// filter's.
const ownPrefix = "sigs.k8s.io/peerdiscovery/"

// topSites is how many of the filter's allocation sites are kept.
const topSites = 8

// heapFigures reads a heap profile: the live heap (inuse_space) and the
// part of it allocated with a peerdiscovery function on the stack,
// attributed to the innermost such function; and the live heap by
// allocating function (the innermost frame).
func heapFigures(path string) (bench.HeapFigures, map[string]float64, error) {
	p, err := parseProfile(path)
	if err != nil {
		return bench.HeapFigures{}, nil, err
	}
	return figures(p, path, "inuse_space", 1)
}

func parseProfile(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// figures sums p's sampleType divided by per: in all, under a
// peerdiscovery function (attributed to the innermost such function), and
// by allocating function (the innermost frame).
func figures(p *profile.Profile, path, sampleType string, per float64) (bench.HeapFigures, map[string]float64, error) {
	var out bench.HeapFigures
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		return out, nil, fmt.Errorf("%s: no %s samples", path, sampleType)
	}
	sites := map[string]float64{}
	flat := map[string]float64{}
	for _, s := range p.Sample {
		v := float64(s.Value[idx]) / per
		out.InUse += v
		if fn := ownFunction(s); fn != "" {
			out.Filter += v
			sites[fn] += v
		}
		if underResync(s) {
			out.Resync += v
		}
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 && s.Location[0].Line[0].Function != nil {
			flat[s.Location[0].Line[0].Function.Name] += v
		}
	}
	out.Top = top(sites, topSites)
	return out, flat, nil
}

// underResync says whether s has a function of the CRD resync's work on
// its stack.
func underResync(s *profile.Sample) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			for _, prefix := range bench.ResyncFunctions {
				if strings.HasPrefix(line.Function.Name, prefix) {
					return true
				}
			}
		}
	}
	return false
}

// allocFigures are what a process allocated between two of its heap
// profiles (each taken after a GC), per second: total, the part under a
// peerdiscovery function, and by allocating function.
func allocFigures(basePath, endPath string) (bench.HeapFigures, map[string]float64, error) {
	var ps []*profile.Profile
	for _, path := range []string{basePath, endPath} {
		p, err := parseProfile(path)
		if err != nil {
			return bench.HeapFigures{}, nil, err
		}
		ps = append(ps, p)
	}
	seconds := float64(ps[1].TimeNanos-ps[0].TimeNanos) / 1e9
	if seconds <= 0 {
		return bench.HeapFigures{}, nil, fmt.Errorf("%s is not later than %s", endPath, basePath)
	}
	ps[0].Scale(-1)
	diff, err := profile.Merge(ps)
	if err != nil {
		return bench.HeapFigures{}, nil, fmt.Errorf("%s minus %s: %w", endPath, basePath, err)
	}
	out, flat, err := figures(diff, endPath, "alloc_space", seconds)
	out.Seconds = seconds
	return out, flat, err
}

// top are the n largest of sites.
func top(sites map[string]float64, n int) []bench.HeapSite {
	var out []bench.HeapSite
	for fn, v := range sites {
		if v > 0 {
			out = append(out, bench.HeapSite{Function: fn, Bytes: v})
		}
	}
	slices.SortFunc(out, func(a, b bench.HeapSite) int {
		switch {
		case a.Bytes > b.Bytes:
			return -1
		case a.Bytes < b.Bytes:
			return 1
		}
		return strings.Compare(a.Function, b.Function)
	})
	return out[:min(len(out), n)]
}

// heapDiff is, per cost state and release, the functions whose share of
// the profiles that fileOf names (live heap, or allocations) grew most
// from upstream's servers to this filter's, means over the servers of
// that release.
func heapDiff(c *bench.CostResult, flat map[string]map[string]float64, fileOf func(bench.ProcessCost) string) map[string][]bench.HeapSite {
	out := map[string][]bench.HeapSite{}
	for _, st := range c.States {
		type acc struct {
			sum map[string]float64
			n   int
		}
		accs := map[string]*acc{} // routing/version
		for _, p := range st.Processes {
			f, ok := flat[fileOf(p)]
			if !ok {
				continue
			}
			k := p.Routing + "/" + p.Version
			if accs[k] == nil {
				accs[k] = &acc{sum: map[string]float64{}}
			}
			accs[k].n++
			for fn, v := range f {
				accs[k].sum[fn] += v
			}
		}
		for k, ours := range accs {
			routing, version, _ := strings.Cut(k, "/")
			up := accs["upstream/"+version]
			if routing != "peerdiscovery" || up == nil {
				continue
			}
			d := map[string]float64{}
			for fn, v := range ours.sum {
				d[fn] += v / float64(ours.n)
			}
			for fn, v := range up.sum {
				d[fn] -= v / float64(up.n)
			}
			out[st.Name+" "+version] = top(d, topSites)
		}
	}
	return out
}

// ownFunction is the innermost peerdiscovery function of the sample's
// stack ("" for none), unless that function only passed the request on to
// kube-apiserver's own chain: the filter's handler is on the stack of
// every request the server serves itself (a long-running watch's buffers
// stay live under it), and what the chain allocates there is not the
// filter's.
func ownFunction(s *profile.Sample) string {
	var names []string // innermost first, inlined frames included
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				names = append(names, l.Function.Name)
			}
		}
	}
	for i, name := range names {
		if !strings.HasPrefix(name, ownPrefix) {
			continue
		}
		if i > 0 && passedOn(names[i-1]) {
			return ""
		}
		return strings.TrimPrefix(name, ownPrefix)
	}
	return ""
}

// passedOn is true for a handler the filter calls that is kube-apiserver's
// chain, not the filter's own proxy (httputil's ReverseProxy,
// apimachinery's UpgradeAwareHandler).
func passedOn(callee string) bool {
	return strings.HasSuffix(callee, ".ServeHTTP") &&
		!strings.HasPrefix(callee, "net/http/httputil.") &&
		!strings.HasPrefix(callee, "k8s.io/apimachinery/pkg/util/proxy.")
}
