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
	"strings"
)

// CostFigure is one figure of the cost goals in one run's last state.
type CostFigure struct {
	Name  string
	Value float64
	// Bound is the goal's upper bound; 0 for a figure reported beside the
	// goals without one.
	Bound float64
}

// CostFigures are the cost goals' figures of r's last state, and the live
// heap after a GC beside RSS (when the heap profiles were read).
func CostFigures(r *Result) []CostFigure {
	if r.Cost == nil || len(r.Cost.States) == 0 {
		return nil
	}
	st := last(r.Cost)
	var out []CostFigure
	for _, v := range versionsOf(st) {
		out = append(out, CostFigure{Name: "RSS added, " + v + " (MiB, steady)", Value: (meanRSS(st, "peerdiscovery", v) - meanRSS(st, "upstream", v)) / (1 << 20), Bound: GoalFilterRSS / (1 << 20)})
		heap := func(p ProcessCost) (float64, bool) {
			f, ok := r.Heap[p.HeapProfile]
			return f.InUse, ok
		}
		if o, u, ok := planeMeans(st, v, heap); ok {
			out = append(out, CostFigure{Name: "live heap after a GC added, " + v + " (MiB)", Value: (o - u) / (1 << 20)})
		}
		if o, u, ok := planeMeans(st, v, allocated); ok {
			out = append(out, CostFigure{Name: "allocation rate, " + v + " (× upstream's)", Value: ratio(o, u), Bound: GoalAllocRatio})
		}
	}
	if ours, up, ok := registrationWrites(st); ok {
		out = append(out, CostFigure{Name: "registration's etcd bytes/s (× upstream's identity Leases)", Value: ratio(ours.BytesPerSecond(), up.BytesPerSecond()), Bound: GoalRegistrationWrites})
	}
	return out
}

// MedianMarkdown is a table of each cost figure in every run and its
// median, judged against its goal.
func MedianMarkdown(runs []*Result) string {
	var names []string
	values := map[string][]float64{}
	bounds := map[string]float64{}
	for _, r := range runs {
		for _, f := range CostFigures(r) {
			if _, seen := values[f.Name]; !seen {
				names = append(names, f.Name)
			}
			values[f.Name] = append(values[f.Name], f.Value)
			bounds[f.Name] = f.Bound
		}
	}
	var b strings.Builder
	b.WriteString("| figure |")
	for i, r := range runs {
		fmt.Fprintf(&b, " run %d (%s) |", i+1, r.Started.UTC().Format("15:04"))
	}
	b.WriteString(" median | goal | |\n|---|")
	b.WriteString(strings.Repeat("---|", len(runs)+3))
	b.WriteString("\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| %s |", n)
		vs := values[n]
		for _, v := range vs {
			fmt.Fprintf(&b, " %.2f |", v)
		}
		for range len(runs) - len(vs) {
			b.WriteString(" – |")
		}
		m := median(vs)
		if bound := bounds[n]; bound > 0 {
			fmt.Fprintf(&b, " %.2f | ≤ %.2f | %s |\n", m, bound, met(len(vs) == len(runs) && m <= bound))
		} else {
			fmt.Fprintf(&b, " %.2f | | |\n", m)
		}
	}
	return b.String()
}
