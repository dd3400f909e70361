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

package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/peerdiscovery/test/workload"
)

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
func ms(d time.Duration) string   { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// Markdown is the report of the soaks of one invocation side by side:
// violations by invariant, what the clients saw, and each incident with
// its timeline.
func Markdown(results ...*Result) string {
	var b strings.Builder
	r0 := results[0]
	fmt.Fprintf(&b, "Chaos soak, seed %d, %d episodes planned for %s (%s of workload).\n\n", r0.Seed, len(r0.Episodes), r0.Duration, secs(r0.End))
	totals := make([]workload.Counts, len(results))
	for i, r := range results {
		_, totals[i] = workload.Summarize(r.Samples, r.Attempts, len(r.Episodes)+2)
	}
	row := func(name string, f func(r *Result, c workload.Counts) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for i, r := range results {
			fmt.Fprintf(&b, " %s |", f(r, totals[i]))
		}
		b.WriteString("\n")
	}
	b.WriteString("| violations by invariant |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.Routing)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	for _, inv := range Invariants {
		row("**"+inv+"**", func(r *Result, _ workload.Counts) string {
			n := r.ByInvariant()[inv]
			if n == 0 {
				return "0"
			}
			return fmt.Sprintf("**%d** (%d incidents)", n, countIncidents(r, inv))
		})
	}
	row("**all violations**", func(r *Result, _ workload.Counts) string { return fmt.Sprintf("**%d**", len(r.Violations)) })
	// The figures the client invariants compare (ClientsOf), so that a
	// reader sees the margin, not only that the bar held.
	row("clients: p99 time to success / failed after retries / skipped", func(r *Result, _ workload.Counts) string {
		c := ClientsOf(r)
		return fmt.Sprintf("%s / %d / %d", ms(c.P99ToSuccess), c.Failed, c.Skipped)
	})
	row("clients: failed or over 1 s (reported, not checked)", func(r *Result, _ workload.Counts) string {
		c := ClientsOf(r)
		return fmt.Sprintf("%d (%.2f %%)", c.FailedOrSlow, 100*float64(c.FailedOrSlow)/float64(max(1, c.Succeeded+c.Failed)))
	})
	row("operations (after client-go's retries)", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Ops) })
	row("2xx", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.OK) })
	row("404", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.NotFound) })
	row("failed after retries (all codes)", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Failed) })
	row("HTTP attempts", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Attempts) })
	row("503 with Retry-After / without", func(_ *Result, c workload.Counts) string {
		return fmt.Sprintf("%d / %d", c.UnavailableRetry, c.UnavailableNoHint)
	})
	row("other 5xx / no response", func(_ *Result, c workload.Counts) string { return fmt.Sprintf("%d / %d", c.Other5xx, c.NoResponse) })
	row("attempts over 10 s (any server)", func(r *Result, _ workload.Counts) string {
		n := 0
		for _, a := range r.Attempts {
			if a.Took > MaxWait {
				n++
			}
		}
		return fmt.Sprint(n)
	})
	row("latency p50 / p99 (watches excluded)", func(_ *Result, c workload.Counts) string { return ms(c.P50) + " / " + ms(c.P99) })
	row("writes", func(r *Result, _ workload.Counts) string {
		return fmt.Sprintf("%d acked creates: %d lost, %d duplicated, %d acked deletes still present", r.Writes.Acked, len(r.Writes.Lost), len(r.Writes.Duplicated), len(r.Writes.StillPresent))
	})
	row("informer checks (equal / all; slowest)", func(r *Result, _ workload.Counts) string {
		eq, all, slowest := 0, 0, time.Duration(0)
		for _, cp := range r.Checkpoints {
			for _, ic := range cp.Informers {
				all++
				if ic.Equal {
					eq++
					slowest = max(slowest, ic.Took)
				}
			}
		}
		return fmt.Sprintf("%d / %d; %s", eq, all, secs(slowest))
	})
	row("deleted namespaces (gone / all; left objects)", func(r *Result, _ workload.Counts) string {
		gone, left := 0, 0
		for _, n := range r.Namespaces {
			if n.Gone {
				gone++
			}
			left += len(n.Left)
		}
		return fmt.Sprintf("%d / %d; %d", gone, len(r.Namespaces), left)
	})
	row("kube-controller-manager restarts", func(r *Result, _ workload.Counts) string { return fmt.Sprint(r.ControllerManagerRestarts) })
	row("operations skipped (all workers busy)", func(r *Result, _ workload.Counts) string { return fmt.Sprint(r.Skipped) })

	b.WriteString("\nFaults by kind (every routing ran the same episodes):\n\n")
	kinds := map[FaultKind]int{}
	for _, ep := range r0.Episodes {
		for _, f := range ep.Faults {
			kinds[f.Kind]++
		}
	}
	var names []string
	for k := range kinds {
		names = append(names, string(k))
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "- %s: %d\n", k, kinds[FaultKind(k)])
	}
	b.WriteString("\nEpisodes:\n\n")
	for i, ep := range r0.Episodes {
		fmt.Fprintf(&b, "%d. %s\n", i+1, ep)
	}
	for _, r := range results {
		incidents := Incidents(r.Violations)
		fmt.Fprintf(&b, "\n### %s: %d incidents\n", r.Routing, len(incidents))
		for _, in := range incidents {
			b.WriteString("\n```\n" + Describe(r.Routing, r.Seed, in, r.Events) + "```\n")
		}
	}
	return b.String()
}

func countIncidents(r *Result, inv string) int {
	n := 0
	for _, in := range Incidents(r.Violations) {
		if in.Invariant == inv {
			n++
		}
	}
	return n
}

// Summary is one table over several invocations (one per seed): the
// violations of each invariant, per seed and routing, and in all.
func Summary(invocations [][]*Result) string {
	var b strings.Builder
	var routingNames []string
	for _, inv := range invocations {
		for _, r := range inv {
			if !slices.Contains(routingNames, r.Routing) {
				routingNames = append(routingNames, r.Routing)
			}
		}
	}
	b.WriteString("| seed | episodes | routing |")
	for _, inv := range Invariants {
		fmt.Fprintf(&b, " %s |", inv)
	}
	b.WriteString(" all | operations | failed after retries | p99 time to success |\n|---|---|---|" + strings.Repeat("---|", len(Invariants)+4) + "\n")
	total := map[string]map[string]int{}
	for _, invocation := range invocations {
		for _, r := range invocation {
			_, c := workload.Summarize(r.Samples, r.Attempts, len(r.Episodes)+2)
			by := r.ByInvariant()
			if total[r.Routing] == nil {
				total[r.Routing] = map[string]int{}
			}
			fmt.Fprintf(&b, "| %d | %d | %s |", r.Seed, len(r.Episodes), r.Routing)
			for _, inv := range Invariants {
				fmt.Fprintf(&b, " %d |", by[inv])
				total[r.Routing][inv] += by[inv]
			}
			total[r.Routing]["ops"] += c.Ops
			total[r.Routing]["failed"] += c.Failed
			fmt.Fprintf(&b, " **%d** | %d | %d | %s |\n", len(r.Violations), c.Ops, c.Failed, ms(ClientsOf(r).P99ToSuccess))
		}
	}
	for _, name := range routingNames {
		fmt.Fprintf(&b, "| all | | **%s** |", name)
		all := 0
		for _, inv := range Invariants {
			fmt.Fprintf(&b, " **%d** |", total[name][inv])
			all += total[name][inv]
		}
		fmt.Fprintf(&b, " **%d** | %d | %d | |\n", all, total[name]["ops"], total[name]["failed"])
	}
	return b.String()
}
