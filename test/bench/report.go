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

// Goals of issue #31.
const (
	GoalListRatio     = 0.9                    // proxied LIST throughput ≥ 0.9× direct
	GoalWatchP99Extra = 2 * time.Millisecond   // proxied watch p99 ≤ direct p99 + 2 ms
	GoalLoadRatio     = 0.6                    // max proxied rps at p99 < 100 ms ≥ 0.6× direct
	LoadP99Bound      = 100 * time.Millisecond // the p99 bound of the full load
	GoalFilterRSS     = 32 << 20               // the filter adds ≤ 32 MiB RSS
	// GoalRegistrationWrites: the filter's Lease bytes written per second
	// ≤ 2× upstream's identity Leases'.
	GoalRegistrationWrites = 2.0
	GoalAllocRatio         = 1.2 // a server's allocation rate ≤ 1.2× upstream's (steady window)
)

func ms(d time.Duration) string  { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
func mib(b float64) string       { return fmt.Sprintf("%.0f", b/(1<<20)) }
func ratio(a, b float64) float64 { return a / max(b, 1e-12) }

// Markdown is the run's report: every table, the goals first.
func Markdown(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Filter cost at scale (%s scale), %s, %s\n\n", r.Scale.Name, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Commit)
	b.WriteString("Both planes (this filter; upstream's built-in proxy, plain upstream binaries) ran at once; every measurement alternated between paths. Ratios are to direct on the same plane.\n\n")
	goals(&b, r)
	if r.List != nil {
		listTable(&b, r.List)
	}
	if len(r.Watch) > 0 {
		watchTable(&b, r.Watch)
	}
	if len(r.Load) > 0 {
		loadTable(&b, r.Load)
		loadCPUTable(&b, r.Load, r.Cores)
	}
	if len(r.CPU) > 0 {
		cpuTable(&b, r)
	}
	if r.Cost != nil {
		costTable(&b, r.Cost, r.Heap)
		heapTables(&b, r.Cost, r.Heap, r.HeapDiff, r.EarlyHeapDiff)
		allocTable(&b, r.Cost, r.AllocDiff)
	}
	b.WriteString("\nMachine load (/proc/loadavg):\n\n")
	keys := make([]string, 0, len(r.LoadAvg))
	for k := range r.LoadAvg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s (took %s)\n", k, r.LoadAvg[k], r.Took[strings.TrimSuffix(strings.TrimSuffix(k, " start"), " end")].Round(time.Second))
	}
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func goals(b *strings.Builder, r *Result) {
	b.WriteString("| goal | this filter | upstream's proxy | |\n|---|---|---|---|\n")
	if r.List != nil {
		sum := r.List.ListSummary()
		worst, worstUp, worstV := 10.0, 10.0, ""
		for v, p := range sum {
			x := ratio(p[PathProxied].MBps, p[PathDirect].MBps)
			if x < worst {
				worst, worstV = x, v.String()
			}
			worstUp = min(worstUp, ratio(p[PathUpstreamProxied].MBps, p[PathUpstreamDirect].MBps))
		}
		fmt.Fprintf(b, "| LIST throughput through v1.36.3 ≥ %.1f× direct (worst variant) | %.2f× (%s) | %.2f× | %s |\n", GoalListRatio, worst, worstV, worstUp, met(worst >= GoalListRatio))
	}
	if len(r.Watch) > 0 {
		byPath := map[string]WatchPhase{}
		for _, w := range r.Watch {
			byPath[w.Path] = w
		}
		d, p := byPath[PathDirect], byPath[PathProxied]
		ud, up := byPath[PathUpstreamDirect], byPath[PathUpstreamProxied]
		fmt.Fprintf(b, "| WATCH p99 ≤ direct p99 + %s, no watcher dropped | p99 %s ms vs direct %s ms (+%s), %d dropped | p99 %s ms vs direct %s ms (+%s), %d dropped | %s |\n",
			ms(GoalWatchP99Extra), ms(p.P99), ms(d.P99), ms(p.P99-d.P99), p.Dropped, ms(up.P99), ms(ud.P99), ms(up.P99-ud.P99), up.Dropped,
			met(p.P99-d.P99 <= GoalWatchP99Extra && p.Dropped == 0))
	}
	if len(r.Load) > 0 {
		m := MaxRPS(r.Load, LoadP99Bound)
		x, ux := ratio(m[PathProxied], m[PathDirect]), ratio(m[PathUpstreamProxied], m[PathUpstreamDirect])
		fmt.Fprintf(b, "| max rps at p99 < 100 ms ≥ %.1f× direct | %.0f vs %.0f: %.2f× | %.0f vs %.0f: %.2f× | %s |\n",
			GoalLoadRatio, m[PathProxied], m[PathDirect], x, m[PathUpstreamProxied], m[PathUpstreamDirect], ux, met(x >= GoalLoadRatio))
	}
	if r.Cost != nil && len(r.Cost.States) > 0 {
		last := r.Cost.States[len(r.Cost.States)-1]
		worst := func(rss func(ProcessCost) float64) (float64, string) {
			w, wv := -1e18, ""
			for _, v := range versionsOf(last) {
				ours, up := meanRSSOf(last, "peerdiscovery", v, rss), meanRSSOf(last, "upstream", v, rss)
				if ours-up > w {
					w, wv = ours-up, v
				}
			}
			return w, wv
		}
		steady, steadyV := worst(func(p ProcessCost) float64 { return p.RSS })
		early, earlyV := worst(func(p ProcessCost) float64 { return p.EarlyRSS })
		fmt.Fprintf(b, "| the filter adds ≤ %s MiB RSS (%d servers, %d extra GVRs: %d CRDs + %d aggregated) | steady (%s after the change): %+.0f MiB (%s, mean over its servers); early (%s after): %+.0f MiB (%s) | (the baseline) | steady: %s; early: %s |\n",
			mib(GoalFilterRSS), len(r.Cost.Servers), last.CRDs+last.StubGVRs, last.CRDs, last.StubGVRs,
			r.Cost.SteadyAt, steady/(1<<20), steadyV, r.Cost.Settle, early/(1<<20), earlyV, met(steady <= GoalFilterRSS), met(early <= GoalFilterRSS))
		for _, v := range versionsOf(last) {
			if o, u, ok := planeMeans(last, v, allocated); ok {
				fmt.Fprintf(b, "| a kube-apiserver allocates ≤ %.1f× upstream's per second (%s, steady window, mean over its servers) | %.2f MiB/s: %.2f× | %.2f MiB/s | %s |\n",
					GoalAllocRatio, v, o/(1<<20), ratio(o, u), u/(1<<20), met(o <= GoalAllocRatio*u))
			}
		}
		if ours, up, ok := registrationWrites(last); ok {
			fmt.Fprintf(b, "| registration's etcd bytes written per second ≤ %.0f× upstream's identity Leases' (steady window) | %.0f B/s (%.1f writes/s): %.2f× | %.0f B/s (%.1f writes/s) | %s |\n",
				GoalRegistrationWrites, ours.BytesPerSecond(), ours.EventsPerSecond(), ratio(ours.BytesPerSecond(), up.BytesPerSecond()),
				up.BytesPerSecond(), up.EventsPerSecond(), met(ours.BytesPerSecond() <= GoalRegistrationWrites*up.BytesPerSecond()))
		}
	}
	b.WriteString("\n")
}

func listTable(b *strings.Builder, l *ListResult) {
	fmt.Fprintf(b, "## LIST of %d StorageVersionMigrations (%d B each as JSON) through v1.36.3\n\n", l.Objects, l.ObjectBytes)
	b.WriteString("Median over rounds of the whole LIST (every page): time in ms, decoded MB/s, time to the first response header in ms; ratio = proxied MB/s ÷ direct MB/s on the same plane.\n\n")
	b.WriteString("| variant | direct | proxied | ratio | upstream direct | upstream proxied | upstream ratio |\n|---|---|---|---|---|---|---|\n")
	sum := l.ListSummary()
	variants := make([]ListVariant, 0, len(sum))
	for v := range sum {
		variants = append(variants, v)
	}
	slices.SortFunc(variants, func(a, b ListVariant) int { return strings.Compare(a.String(), b.String()) })
	cell := func(f ListFigures) string {
		return fmt.Sprintf("%s ms, %.1f MB/s, TTFB %s", ms(f.Took), f.MBps, ms(f.FirstByte))
	}
	for _, v := range variants {
		p := sum[v]
		fmt.Fprintf(b, "| %s (%.1f MB, %.1f MB on the wire) | %s | %s | %.2f× | %s | %s | %.2f× |\n", v,
			float64(p[PathDirect].Bytes)/1e6, float64(p[PathDirect].WireBytes)/1e6,
			cell(p[PathDirect]), cell(p[PathProxied]), ratio(p[PathProxied].MBps, p[PathDirect].MBps),
			cell(p[PathUpstreamDirect]), cell(p[PathUpstreamProxied]), ratio(p[PathUpstreamProxied].MBps, p[PathUpstreamDirect].MBps))
	}
	b.WriteString("\nRSS of the server the client talks to (MiB), before the LISTs → peak while its LISTs ran:")
	for _, p := range PathNames {
		fmt.Fprintf(b, " %s %s → %s;", p, mib(l.SourceRSSBefore[p]), mib(l.SourceRSSPeak[p]))
	}
	b.WriteString("\n\n")
}

func watchTable(b *strings.Builder, ws []WatchPhase) {
	b.WriteString("## WATCH through v1.36.3\n\n")
	b.WriteString("Latency from each write's acknowledgement to its delivery, over every watcher and change (negative: delivered before the writer saw its answer). RSS of the server the watchers are connected to, before → peak; CPU seconds over the phase; kube-apiserver CPU per delivery: the source's and, on a proxied path, the peer's (on a direct path they are one server), over every event delivered to a watcher.\n\n")
	b.WriteString("| path | watchers | changes acked (skipped) | p50 ms | p99 ms | max ms | dropped | missing | source RSS MiB | source CPU s | peer RSS peak MiB | peer CPU s | CPU µs per delivery |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range ws {
		fmt.Fprintf(b, "| %s | %d | %d (%d) | %s | %s | %s | %d | %d | %s → %s | %.1f | %s | %.1f | %s |\n", w.Path, w.Watchers, w.Acked, w.Skipped,
			ms(w.P50), ms(w.P99), ms(w.Max), w.Dropped, w.Missing, mib(w.SourceRSSBefore), mib(w.SourceRSSPeak), w.SourceCPU.Seconds(), mib(w.PeerRSSPeak), w.PeerCPU.Seconds(), w.cpuPerDelivery())
	}
	for _, w := range ws {
		for _, e := range w.DropErrors {
			fmt.Fprintf(b, "\n- %s: %s", w.Path, e)
		}
	}
	b.WriteString("\n\n")
}

func loadTable(b *strings.Builder, steps []LoadStep) {
	b.WriteString("## Full load: closed-loop GETs of one StorageVersionMigration, one connection per worker\n\n")
	b.WriteString("Per concurrency: rps / p99 ms (the worse of the rounds), errors if any.\n\n")
	b.WriteString("| c |")
	for _, p := range PathNames {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString("\n|---|---|---|---|---|\n")
	type key struct {
		p string
		c int
	}
	worst := map[key]LoadStep{}
	var cs []int
	for _, s := range steps {
		k := key{s.Path, s.Concurrency}
		if w, ok := worst[k]; ok {
			s.RPS, s.P99, s.Errors = min(w.RPS, s.RPS), max(w.P99, s.P99), w.Errors+s.Errors
		}
		worst[k] = s
		if !slices.Contains(cs, s.Concurrency) {
			cs = append(cs, s.Concurrency)
		}
	}
	slices.Sort(cs)
	for _, c := range cs {
		fmt.Fprintf(b, "| %d |", c)
		for _, p := range PathNames {
			s := worst[key{p, c}]
			e := ""
			if s.Errors > 0 {
				e = fmt.Sprintf(", %d errors", s.Errors)
			}
			fmt.Fprintf(b, " %.0f / %s%s |", s.RPS, ms(s.P99), e)
		}
		b.WriteString("\n")
	}
	m := MaxRPS(steps, LoadP99Bound)
	fmt.Fprintf(b, "| **max rps, p99 < 100 ms** | %.0f | %.0f (%.2f×) | %.0f | %.0f (%.2f×) |\n\n",
		m[PathDirect], m[PathProxied], ratio(m[PathProxied], m[PathDirect]),
		m[PathUpstreamDirect], m[PathUpstreamProxied], ratio(m[PathUpstreamProxied], m[PathUpstreamDirect]))
}

// loadCPUTable is, per path, the CPU time per request of every process
// on its way at the highest concurrency (all rounds together): what a
// request costs the machine, and so the most requests per second its
// cores could serve on that path, whatever the latency.
func loadCPUTable(b *strings.Builder, steps []LoadStep, cores int) {
	top := 0
	for _, s := range steps {
		top = max(top, s.Concurrency)
	}
	sum := map[string]*LoadStep{}
	for _, s := range steps {
		if s.Concurrency != top || s.CPU == nil {
			continue
		}
		a := sum[s.Path]
		if a == nil {
			a = &LoadStep{CPU: &StepCPU{}}
			sum[s.Path] = a
		}
		a.Requests += s.Requests
		a.CPU.Source += s.CPU.Source
		a.CPU.Peer += s.CPU.Peer
		a.CPU.Etcd += s.CPU.Etcd
		a.CPU.Client += s.CPU.Client
	}
	if len(sum) == 0 {
		return
	}
	fmt.Fprintf(b, "CPU time per request at c=%d, every round (ms, from /proc): the server the client talks to, the server that answers (proxied paths), etcd, the client; the bound is %d cores ÷ the total, the most requests per second this machine could serve on the path if nothing else ran.\n\n", top, cores)
	b.WriteString("| path | source | peer | etcd | client | total | × direct's total | bound rps |\n|---|---|---|---|---|---|---|---|\n")
	direct := map[string]time.Duration{}
	for _, p := range PathNames {
		if c, ok := sum[p].PerRequestOK(); ok && strings.HasSuffix(p, "/direct") {
			direct[strings.TrimSuffix(p, "/direct")] = c.Total()
		}
	}
	msf := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }
	for _, p := range PathNames {
		c, ok := sum[p].PerRequestOK()
		if !ok {
			continue
		}
		rel := "–"
		if d := direct[strings.Split(p, "/")[0]]; d > 0 {
			rel = fmt.Sprintf("%.2f×", float64(c.Total())/float64(d))
		}
		bound := "–"
		if c.Total() > 0 && cores > 0 {
			bound = fmt.Sprintf("%.0f", float64(cores)*float64(time.Second)/float64(c.Total()))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p, msf(c.Source), msf(c.Peer), msf(c.Etcd), msf(c.Client), msf(c.Total()), rel, bound)
	}
	b.WriteString("\n")
}

// cpuAreas is the order of the CPU profiles' columns.
var cpuAreas = []string{"TLS and crypto", "HTTP/2", "net/http", "syscalls", "memmove", "encoding", "Go GC and allocation", "Go scheduler and runtime", "this filter", "upstream's proxy", "kube-apiserver, other"}

func cpuTable(b *strings.Builder, r *Result) {
	b.WriteString("## Where the proxied paths' CPU goes (profiles of the source and the peer while each proxied workload ran)\n\n")
	b.WriteString("Cores = CPU seconds sampled ÷ profile seconds. Areas by the innermost frame, in % of the sampled time; \"under the proxy\" is the time with the proxy's own function on the stack (this filter's, or upstream's peerproxy), its TLS and HTTP/2 included, the local chain it hands requests to excluded.\n\n")
	b.WriteString("| part | plane | server | workload | cores | under the proxy |")
	for _, a := range cpuAreas {
		fmt.Fprintf(b, " %s |", a)
	}
	b.WriteString("\n|---|---|---|---|---|---|" + strings.Repeat("---|", len(cpuAreas)) + "\n")
	var tops []string
	for _, p := range r.Profiles() {
		f, ok := r.CPU[p.File]
		if !ok || f.Total == 0 {
			continue
		}
		pct := func(d time.Duration) string { return fmt.Sprintf("%.0f", 100*float64(d)/float64(f.Total)) }
		fmt.Fprintf(b, "| %s | %s | %s (%s) | %s | %.2f | %s |", p.Part, p.Routing, p.Role, p.Component, p.Workload, f.Total.Seconds()/float64(max(p.Seconds, 1)), pct(f.Filter))
		for _, a := range cpuAreas {
			fmt.Fprintf(b, " %s |", pct(f.Areas[a]))
		}
		b.WriteString("\n")
		var fns []string
		for _, t := range f.Top[:min(len(f.Top), 6)] {
			fns = append(fns, fmt.Sprintf("%s %.0f%%", t.Function, 100*t.Bytes/f.Total.Seconds()))
		}
		tops = append(tops, fmt.Sprintf("- %s, %s %s: %s", p.Part, p.Routing, p.Role, strings.Join(fns, "; ")))
	}
	b.WriteString("\nLargest functions by flat time (profiles in the output folder, `go tool pprof -top <file>`):\n\n" + strings.Join(tops, "\n") + "\n\n")
}
