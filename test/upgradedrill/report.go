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

package upgradedrill

import (
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/peerdiscovery/test/workload"
)

// Summarize counts per phase and in total.
func Summarize(r *Result) (perPhase []workload.Counts, total workload.Counts) {
	return workload.Summarize(r.Samples, r.Attempts, len(r.Phases))
}

// InformersEqual counts the informers whose cache equals the quorum list.
func (r *Result) InformersEqual() (equal, all int) {
	for _, ic := range r.Informers {
		if ic.Equal {
			equal++
		}
	}
	return equal, len(r.Informers)
}

func ms(d time.Duration) string   { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// Markdown is the report of one or more drills side by side.
func Markdown(results ...*Result) string {
	var b strings.Builder
	totals := make([]workload.Counts, len(results))
	for i, r := range results {
		_, totals[i] = Summarize(r)
	}
	row := func(name string, f func(r *Result, c workload.Counts) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for i, r := range results {
			fmt.Fprintf(&b, " %s |", f(r, totals[i]))
		}
		b.WriteString("\n")
	}
	b.WriteString("| |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.Routing)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	row("operations (after client-go's retries)", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Ops) })
	row("2xx", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.OK) })
	row("**false 404s**", func(_ *Result, c workload.Counts) string { return fmt.Sprintf("**%d**", c.NotFound) })
	row("409 Conflict", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Conflict) })
	row("**errors left after retries** (all codes)", func(_ *Result, c workload.Counts) string { return fmt.Sprintf("**%d**", c.Failed) })
	row("HTTP attempts", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Attempts) })
	row("429", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.TooMany) })
	row("503 with Retry-After (retried by client-go)", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.UnavailableRetry) })
	row("503 without Retry-After", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.UnavailableNoHint) })
	row("other 5xx", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.Other5xx) })
	row("no response (connection error)", func(_ *Result, c workload.Counts) string { return fmt.Sprint(c.NoResponse) })
	row("latency p50 / p99 (watches excluded)", func(_ *Result, c workload.Counts) string { return ms(c.P50) + " / " + ms(c.P99) })
	row("**writes**", func(r *Result, _ workload.Counts) string {
		return fmt.Sprintf("%d acked creates: %d lost, %d duplicated, %d acked deletes still present", r.Writes.Acked, len(r.Writes.Lost), len(r.Writes.Duplicated), len(r.Writes.StillPresent))
	})
	row("**informers equal to the final quorum list**", func(r *Result, _ workload.Counts) string {
		e, n := r.InformersEqual()
		return fmt.Sprintf("%d of %d", e, n)
	})
	row("**deleted namespaces**", func(r *Result, _ workload.Counts) string {
		gone, left, objs := 0, 0, 0
		for _, n := range r.Namespaces {
			if n.Gone {
				gone++
			}
			if len(n.Left) > 0 {
				left++
				objs += len(n.Left)
			}
		}
		return fmt.Sprintf("%d of %d gone; %d left %d objects behind", gone, len(r.Namespaces), left, objs)
	})
	row("kube-controller-manager restarts", func(r *Result, _ workload.Counts) string { return fmt.Sprint(r.ControllerManagerRestarts) })
	row("operations skipped (all workers busy)", func(r *Result, _ workload.Counts) string { return fmt.Sprint(r.Skipped) })

	b.WriteString("\nRouting convergence per step (from the stepping server's audit log): **leave** is from its SIGTERM to the last request another server proxied to it; **join** is from its readyz to the first request each other server proxied to it, median and slowest over those servers (— where no server proxied to it).\n\n")
	b.WriteString("| step |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s: stop, start | leave | join |", r.Routing)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|---|---|", len(results)) + "\n")
	for i := range results[0].Steps {
		fmt.Fprintf(&b, "| %s |", results[0].Steps[i].Step)
		for _, r := range results {
			if i >= len(r.Steps) {
				b.WriteString(" | | |")
				continue
			}
			s := r.Steps[i]
			leave, join := "—", "—"
			if s.Convergence.Leave != nil {
				leave = fmt.Sprintf("%s (%d proxied in the 10 s before)", secs(*s.Convergence.Leave), s.Convergence.ProxiedBefore)
			}
			if len(s.Convergence.Join) > 0 {
				p50, slowest := s.Convergence.JoinP50Max()
				join = fmt.Sprintf("p50 %s, max %s (%d servers)", secs(p50), secs(slowest), len(s.Convergence.Join))
			}
			fmt.Fprintf(&b, " %s, %s | %s | %s |", secs(s.Exited-s.SIGTERM), secs(s.Ready-s.Exited), leave, join)
		}
		b.WriteString("\n")
	}
	for _, r := range results {
		per, _ := Summarize(r)
		fmt.Fprintf(&b, "\nPer phase, %s:\n\n| phase | ops | 2xx | false 404 | 409 | failed | 429 | 503+RA | 503 | other 5xx | no response | p50 | p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", r.Routing)
		for i, p := range r.Phases {
			c := per[i]
			fmt.Fprintf(&b, "| %s (%s–%s) | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |\n", p.Name, secs(p.Start), secs(p.End),
				c.Ops, c.OK, c.NotFound, c.Conflict, c.Failed, c.TooMany, c.UnavailableRetry, c.UnavailableNoHint, c.Other5xx, c.NoResponse, ms(c.P50), ms(c.P99))
		}
	}
	return b.String()
}

// Violations are where res misses the drill's bar for its clients: too
// few operations (the workload did not run), false 404s, operations
// failed after client-go's retries (each listed), writes lost or applied
// twice, informers (informers of them) not equal to the final list, and
// deleted namespaces not gone or that left objects behind.
func Violations(res *Result, plan Plan, informers int) []string {
	var v []string
	_, total := Summarize(res)
	if total.Ops < plan.Rate*int(plan.Warmup.Seconds()) {
		v = append(v, fmt.Sprintf("only %d operations: the workload did not run", total.Ops))
	}
	if total.NotFound != 0 {
		v = append(v, fmt.Sprintf("%d false 404s", total.NotFound))
	}
	if total.Failed != 0 {
		v = append(v, fmt.Sprintf("%d operations failed after client-go's retries", total.Failed))
	}
	if total.NotFound+total.Failed != 0 {
		for _, s := range res.Samples {
			if s.Code != 200 {
				v = append(v, fmt.Sprintf("  at %s on kube-apiserver-%d: %s %s: %d %s", secs(s.At), s.Server, s.Verb, s.Kind, s.Code, s.Err))
			}
		}
	}
	if !res.Writes.OK() {
		v = append(v, fmt.Sprintf("writes: %s", res.Writes))
	}
	if e, n := res.InformersEqual(); e != n || n != informers {
		v = append(v, fmt.Sprintf("informers equal to the final quorum list: %d of %d (want %d of %d): %+v", e, n, informers, informers, res.Informers))
	}
	if len(res.Namespaces) == 0 {
		v = append(v, "no namespace was deleted")
	}
	for _, n := range res.Namespaces {
		if !n.Gone || len(n.Left) > 0 || n.Err != "" {
			v = append(v, fmt.Sprintf("namespace %s (deleted at %s): gone %v, left behind %v %s", n.Name, secs(n.Deleted), n.Gone, n.Left, n.Err))
		}
	}
	return v
}
