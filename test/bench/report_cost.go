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
	"fmt"
	"slices"
	"strings"
	"time"
)

func versionsOf(st CostState) []string {
	var vs []string
	for _, p := range st.Processes {
		if p.Version != "" && !slices.Contains(vs, p.Version) {
			vs = append(vs, p.Version)
		}
	}
	slices.Sort(vs)
	return vs
}

// last is the last state measured.
func last(c *CostResult) CostState { return c.States[len(c.States)-1] }

// meanRSS is the mean RSS of the plane's kube-apiservers of version.
func meanRSS(st CostState, routing, version string) float64 {
	return meanRSSOf(st, routing, version, func(p ProcessCost) float64 { return p.RSS })
}

// meanRSSOf is the mean of one RSS figure of those servers.
func meanRSSOf(st CostState, routing, version string, rss func(ProcessCost) float64) float64 {
	m, _ := meanOf(st, routing, version, func(p ProcessCost) (float64, bool) { return rss(p), true })
	return m
}

// allocated is a server's allocation rate over the steady window, if read.
func allocated(p ProcessCost) (float64, bool) { return p.Allocated, p.Go != nil }

// planeMeans are meanOf both planes' servers of version, and whether both
// had a value.
func planeMeans(st CostState, version string, value func(ProcessCost) (float64, bool)) (ours, upstream float64, ok bool) {
	ours, okO := meanOf(st, "peerdiscovery", version, value)
	upstream, okU := meanOf(st, "upstream", version, value)
	return ours, upstream, okO && okU
}

// meanOf is the mean of value over the plane's kube-apiservers of version
// that have one, and whether any had.
func meanOf(st CostState, routing, version string, value func(ProcessCost) (float64, bool)) (float64, bool) {
	var sum float64
	n := 0
	for _, p := range st.Processes {
		if p.Routing != routing || p.Version != version {
			continue
		}
		if v, ok := value(p); ok {
			sum += v
			n++
		}
	}
	return sum / float64(max(n, 1)), n > 0
}

func costTable(b *strings.Builder, c *CostResult, heap map[string]HeapFigures) {
	fmt.Fprintf(b, "## The filter's own cost: %d kube-apiservers per plane (%s)\n\n", len(c.Servers), strings.Join(c.Servers, ", "))
	fmt.Fprintf(b, "States: idle; with %d CRDs (created and served everywhere in %s); with %d more resources of aggregated APIServices (a stub server's, %d per group-version; in %s): %d extra GVRs in all.\n\n",
		c.CRDs, c.CRDsTook.Round(time.Second), c.StubGVRs, perGroup, c.StubTook.Round(time.Second), c.CRDs+c.StubGVRs)
	if c.CRDsNote != "" {
		fmt.Fprintf(b, "CRDs: %d of the %d wanted; %s.\n\n", c.CRDs, c.CRDsWanted, c.CRDsNote)
	}
	fmt.Fprintf(b, "Before each state's %s settle time, both planes had to be quiet at once: every kube-apiserver under %.0f%% of a core over %s (bounded at %s). Each plane was first quiet after:", c.Settle, quietCPU*100, quietWindow, costQuietBound)
	for _, st := range c.States {
		fmt.Fprintf(b, " %s:", st.Name)
		for _, q := range st.Quiet {
			not := ""
			if !q.Reached {
				not = " (not reached)"
			}
			fmt.Fprintf(b, " %s %s%s;", q.Routing, q.After.Round(time.Second), not)
		}
	}
	b.WriteString("\n\n")
	if len(c.States) > 0 {
		fmt.Fprintf(b, "Two windows per state: early, %s long, %s after both planes were quiet, and steady, %s after, as long as the early one except in the last state (the goals' one), where it is %s: one period of kube-apiserver's 5-minute informer resyncs, whose CRD resync rebuilds every CRD's OpenAPI v3 spec (0.8–0.9 GB per server at 1,000 CRDs), so each server's burst falls in it once whatever its phase. At the steady window's start every kube-apiserver of both planes is made to collect (a heap profile with gc=1, one server after another), so the steady window starts right after a GC on every server: a GC that landed during the state change's allocation burst, the heap goal it raised, and where each server happened to be in its GC cycle no longer decide the figure. The tables below are the steady window's; the means give the early one too.\n\n", last(c).Window, c.Settle, c.SteadyAt, last(c).Steady())
	}
	b.WriteString("Per process: RSS (mean of 1/s samples over the window), CPU over the window (% of one core), live heap after a GC and the filter's part of it (allocated under a peerdiscovery function), from its heap profile; allocated per second over the window and GCs in it (go_memstats), and the filter's part of the allocations (over the steady window: the difference of two heap profiles).\n\n")
	b.WriteString("| state | process | this filter: RSS MiB | CPU % | heap MiB | filter's part MiB | alloc MiB/s | filter's part MiB/s | GCs | upstream: RSS MiB | CPU % | heap MiB | alloc MiB/s | GCs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, st := range c.States {
		byKey := map[string]map[string]ProcessCost{}
		var comps []string
		for _, p := range st.Processes {
			if byKey[p.Component] == nil {
				byKey[p.Component] = map[string]ProcessCost{}
				comps = append(comps, p.Component)
			}
			byKey[p.Component][p.Routing] = p
		}
		for _, comp := range comps {
			o, u := byKey[comp]["peerdiscovery"], byKey[comp]["upstream"]
			name := comp
			if o.Version != "" {
				name += " " + o.Version
			}
			cpu := func(p ProcessCost) string { return fmt.Sprintf("%.1f", 100*p.CPU.Seconds()/st.Steady().Seconds()) }
			h := func(p ProcessCost, filter bool) string {
				f, ok := heap[p.HeapProfile]
				if !ok {
					return "–"
				}
				if filter {
					return fmt.Sprintf("%.1f", f.Filter/(1<<20))
				}
				return mib(f.InUse)
			}
			alloc := func(p ProcessCost) string {
				if p.Go == nil {
					return "– | –"
				}
				return fmt.Sprintf("%.2f | %d", p.Allocated/(1<<20), p.GCs)
			}
			allocFilter := "–"
			if f, ok := heap[o.AllocBase]; ok {
				allocFilter = fmt.Sprintf("%.3f", f.Filter/(1<<20))
			}
			oAlloc, oGCs, _ := strings.Cut(alloc(o), " | ")
			uCells := "– | – | – | – | –"
			if u.Component != "" {
				uCells = fmt.Sprintf("%s | %s | %s | %s", mib(u.RSS), cpu(u), h(u, false), alloc(u))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", st.Name, name, mib(o.RSS), cpu(o), h(o, false), h(o, true), oAlloc, allocFilter, oGCs, uCells)
		}
		for _, v := range versionsOf(st) {
			ours, up := meanRSS(st, "peerdiscovery", v), meanRSS(st, "upstream", v)
			early := func(p ProcessCost) float64 { return p.EarlyRSS }
			eOurs, eUp := meanRSSOf(st, "peerdiscovery", v, early), meanRSSOf(st, "upstream", v, early)
			fmt.Fprintf(b, "| %s | **%s mean** | %s | | | | | | | %s | | (filter − upstream: %+.0f MiB; early window: %s against %s, %+.0f MiB) | | |\n",
				st.Name, v, mib(ours), mib(up), (ours-up)/(1<<20), mib(eOurs), mib(eUp), (eOurs-eUp)/(1<<20))
		}
	}
	b.WriteString("\n")
	goMemoryTable(b, c, heap, "at the window's end (go_memstats, before the profile's GC", func(p ProcessCost) (*GoMemory, string) { return p.Go, p.HeapProfile })
	goMemoryTable(b, c, heap, "at the early window's end (go_memstats, no GC forced", func(p ProcessCost) (*GoMemory, string) { return p.EarlyGo, p.EarlyHeapProfile })
	allocResyncTable(b, c, heap)
	leaseTable(b, c)
}

// allocResyncTable splits each state's allocation rate by the profiles (the
// difference of each server's two heap profiles over the steady window)
// into the CRD resync's work (ResyncFunctions), which every kube-apiserver
// repeats every 5 minutes, and the rest: means over each release's
// servers.
func allocResyncTable(b *strings.Builder, c *CostResult, heap map[string]HeapFigures) {
	var rows strings.Builder
	for _, st := range c.States {
		for _, v := range versionsOf(st) {
			var cells [2][2]float64 // plane, (all, resync)
			ok := true
			for k, routing := range []string{"peerdiscovery", "upstream"} {
				for j, part := range []func(HeapFigures) float64{
					func(f HeapFigures) float64 { return f.InUse },
					func(f HeapFigures) float64 { return f.Resync },
				} {
					var found bool
					cells[k][j], found = meanOf(st, routing, v, func(p ProcessCost) (float64, bool) {
						f, ok := heap[p.AllocBase]
						return part(f), ok && f.Seconds > 0
					})
					ok = ok && found
				}
			}
			if !ok {
				continue
			}
			rest := func(k int) float64 { return cells[k][0] - cells[k][1] }
			fmt.Fprintf(&rows, "| %s | %s | %.2f | %.2f | %.2f× | %.2f | %.2f | %.2f | %.2f | %.2f× |\n", st.Name, v,
				cells[0][0]/(1<<20), cells[1][0]/(1<<20), ratio(cells[0][0], cells[1][0]),
				cells[0][1]/(1<<20), cells[1][1]/(1<<20), rest(0)/(1<<20), rest(1)/(1<<20), ratio(rest(0), rest(1)))
		}
	}
	writeTable(b, "Allocation by the profiles over the steady window (MiB/s, means over each release's servers): in all; the part under the CRD resync's work (apiextensions' OpenAPI v3 controller and CRD discovery controller, which every kube-apiserver repeats for every CRD each 5 minutes); the rest, which is where the filter's own allocation shows.\n\n",
		"| state | release | in all: filter | upstream | ratio | CRD resync: filter | upstream | the rest: filter | upstream | ratio |\n|---|---|---|---|---|---|---|---|---|---|\n", rows.String())
}

// registrationWrites are what registration writes in st: this filter's
// registration and served-record Leases, upstream's identity Leases.
func registrationWrites(st CostState) (ours, upstream LeaseWrites, ok bool) {
	for _, w := range st.Leases {
		switch {
		case w.Routing == "peerdiscovery" && (w.Class == LeaseRegistration || w.Class == LeaseServedRecord):
			ours.Events += w.Events
			ours.Bytes += w.Bytes
			ours.Window = w.Window
		case w.Routing == "upstream" && w.Class == LeaseIdentity:
			upstream = w
		}
	}
	return ours, upstream, ours.Window > 0 && upstream.Window > 0
}

// leaseTable is each state's Lease writes by plane and class.
func leaseTable(b *strings.Builder, c *CostResult) {
	var rows strings.Builder
	for _, st := range c.States {
		for _, w := range st.Leases {
			fmt.Fprintf(&rows, "| %s | %s | %s | %d | %.2f | %.0f | %.0f |\n", st.Name, w.Routing, w.Class, w.Events, w.EventsPerSecond(), w.BytesPerSecond(), float64(w.Bytes)/float64(max(w.Events, 1)))
		}
	}
	writeTable(b, "Lease writes over the steady window (a watch of the Leases' namespace on each plane; each write is an etcd write and a watch event every kube-apiserver's watch cache decodes), by class: this filter's registration Leases (renewed every 5 s) and served-record Leases (written on change), kube-apiserver's own identity Leases (both planes). Bytes: the objects as kube-apiserver stores them (protobuf, with its envelope; etcd's key and revision overhead not counted).\n\n",
		"| state | plane | class | writes | writes/s | bytes/s | bytes per write |\n|---|---|---|---|---|---|---|\n", rows.String())
}

// goMemoryTable splits each state's RSS difference: Go heap in use, heap
// the runtime holds idle without returning it to the OS, and the next GC's
// target, at one moment (when: the caption's), and the live heap of the
// heap profile taken right after, after a GC; means over each release's
// servers.
func goMemoryTable(b *strings.Builder, c *CostResult, heap map[string]HeapFigures, when string, at func(ProcessCost) (*GoMemory, string)) {
	type figure func(p ProcessCost) (float64, bool)
	fromGo := func(f func(*GoMemory) float64) figure {
		return func(p ProcessCost) (float64, bool) {
			if m, _ := at(p); m != nil {
				return f(m), true
			}
			return 0, false
		}
	}
	inuse := fromGo(func(m *GoMemory) float64 { return m.HeapInuse })
	kept := fromGo(func(m *GoMemory) float64 { return m.HeapIdle - m.HeapReleased })
	goal := fromGo(func(m *GoMemory) float64 { return m.NextGC })
	live := func(p ProcessCost) (float64, bool) {
		_, profile := at(p)
		f, ok := heap[profile]
		return f.InUse, ok
	}
	var rows strings.Builder
	for _, st := range c.States {
		for _, v := range versionsOf(st) {
			cell := func(f figure) (string, bool) {
				o, okO := meanOf(st, "peerdiscovery", v, f)
				u, okU := meanOf(st, "upstream", v, f)
				if !okO || !okU {
					return " – | – | |", false
				}
				return fmt.Sprintf(" %s | %s | %+.0f |", mib(o), mib(u), (o-u)/(1<<20)), true
			}
			cells := ""
			for _, f := range []figure{inuse, kept, goal} {
				text, ok := cell(f)
				if !ok {
					cells = ""
					break
				}
				cells += text
			}
			if cells != "" {
				// "–" when no profile was read (hack/bench-report).
				text, _ := cell(live)
				cells += text
			}
			if cells != "" {
				fmt.Fprintf(&rows, "| %s | %s |%s\n", st.Name, v, cells)
			}
		}
	}
	writeTable(b, "Go runtime memory "+when+"; MiB, means over each release's servers): heap in use; heap idle and not returned to the OS (idle − released); the next GC's target; the live heap after a GC (the heap profile taken right after).\n\n",
		"| state | release | in use: filter | upstream | Δ | idle kept: filter | upstream | Δ | GC target: filter | upstream | Δ | live after a GC: filter | upstream | Δ |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", rows.String())
}

// heapTables name, for the last state, where the filter's part of the heap
// is, and which allocating functions hold more live heap in this filter's
// servers than in upstream's, at the steady window's end and (early) at the
// early window's.
func heapTables(b *strings.Builder, c *CostResult, heap map[string]HeapFigures, diff, early map[string][]HeapSite) {
	if len(heap) == 0 || len(c.States) == 0 {
		return
	}
	last := c.States[len(c.States)-1]
	for _, p := range last.Processes {
		f, ok := heap[p.HeapProfile]
		if !ok || p.Routing != "peerdiscovery" {
			continue
		}
		fmt.Fprintf(b, "The filter's part of the live heap of %s %s (%s state), by innermost peerdiscovery function: %.1f MiB of %.0f MiB:", p.Component, p.Version, last.Name, f.Filter/(1<<20), f.InUse/(1<<20))
		for _, s := range f.Top {
			fmt.Fprintf(b, " %s %.2f;", s.Function, s.Bytes/(1<<20))
		}
		b.WriteString(" (a stack attribution: objects the filter's informers decode from watch events are allocated on client-go's goroutines, under no filter function, and are only in the difference below)\n\n")
		break
	}
	for _, d := range []struct {
		when  string
		sites map[string][]HeapSite
	}{{"", diff}, {"; at the early window's end", early}} {
		for _, k := range keysOfState(d.sites, last.Name) {
			fmt.Fprintf(b, "Live heap by allocating function, this filter's servers minus upstream's (%s, means over the servers%s), largest growths:", k, d.when)
			for _, s := range d.sites[k] {
				fmt.Fprintf(b, " %s %+.1f MiB;", s.Function, s.Bytes/(1<<20))
			}
			b.WriteString("\n\n")
		}
	}
}

// allocTable names, for the last state, the allocating functions that
// allocated more per second in this filter's servers than in upstream's
// over the steady window.
func allocTable(b *strings.Builder, c *CostResult, diff map[string][]HeapSite) {
	if len(c.States) == 0 {
		return
	}
	for _, k := range keysOfState(diff, c.States[len(c.States)-1].Name) {
		fmt.Fprintf(b, "Allocated per second over the steady window, by allocating function, this filter's servers minus upstream's (%s, means over the servers; the difference of two heap profiles, each after a GC), largest growths:", k)
		for _, s := range diff[k] {
			fmt.Fprintf(b, " %s %+.3f MiB/s;", s.Function, s.Bytes/(1<<20))
		}
		b.WriteString("\n\n")
	}
}

// keysOfState are diff's keys ("<state> <release>") of state, sorted.
func keysOfState(diff map[string][]HeapSite, state string) []string {
	var keys []string
	for k := range diff {
		if strings.HasPrefix(k, state+" ") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// writeTable writes a table's introduction, header and rows, or nothing
// when it has no rows.
func writeTable(b *strings.Builder, intro, header, rows string) {
	if rows == "" {
		return
	}
	b.WriteString(intro)
	b.WriteString(header)
	b.WriteString(rows)
	b.WriteString("\n")
}
