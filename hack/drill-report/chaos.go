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
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"sigs.k8s.io/peerdiscovery/test/chaos"
)

// chaosReport reads dir/results.json (the soaks of one invocation) and
// writes dir/report.md and dir/timeline.png.
func chaosReport(dir string) error {
	results, err := readChaos(dir)
	if err != nil {
		return err
	}
	md := filepath.Join(dir, "report.md")
	if err := os.WriteFile(md, []byte(chaos.Markdown(results...)), 0o644); err != nil {
		return err
	}
	png := filepath.Join(dir, "timeline.png")
	if err := chaosTimeline(png, results); err != nil {
		return err
	}
	fmt.Printf("%s\n%s\n", md, png)
	return nil
}

// chaosSummary writes one table over the soaks in dirs to path.
func chaosSummary(path string, dirs []string) error {
	var all [][]*chaos.Result
	for _, dir := range dirs {
		results, err := readChaos(dir)
		if err != nil {
			return err
		}
		all = append(all, results)
	}
	if len(all) == 0 {
		return fmt.Errorf("no soak folders given")
	}
	if err := os.WriteFile(path, []byte(chaos.Summary(all)), 0o644); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

func readChaos(dir string) ([]*chaos.Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var results []*chaos.Result
	if err := json.Unmarshal(data, &results); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("no soak in %s", dir)
	}
	return results, nil
}

// chaosTimeline draws, per routing, the violations per 5 s by invariant,
// then latency and failures, with every fault's start (dashed) and heal
// (solid) marked.
func chaosTimeline(path string, results []*chaos.Result) error {
	end := time.Duration(0)
	for _, r := range results {
		end = max(end, r.End)
	}
	n := int(end/bucket) + 1
	var rows [][]*plot.Plot
	for _, r := range results {
		viol, lat, fails := plot.New(), plot.New(), plot.New()
		viol.Title.Text = fmt.Sprintf("%s, seed %d: violations per 5 s (%d in all)", r.Routing, r.Seed, len(r.Violations))
		lat.Title.Text = r.Routing + ": latency of operations (watches excluded), per 5 s"
		lat.Y.Label.Text = "ms"
		lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		fails.Title.Text = r.Routing + ": per second"
		fails.X.Label.Text = "seconds since the workload started"
		byInv := map[string]plotter.XYs{}
		top := 1.0
		for _, inv := range chaos.Invariants {
			counts := make([]float64, n)
			for _, v := range r.Violations {
				if v.Invariant == inv && int(v.At/bucket) < n {
					counts[int(v.At/bucket)]++
				}
			}
			xy := make(plotter.XYs, n)
			for i := range n {
				xy[i] = plotter.XY{X: (float64(i) + 0.5) * bucket.Seconds(), Y: counts[i]}
				top = max(top, counts[i]*1.15)
			}
			byInv[inv] = xy
		}
		if err := addLines(viol, byInv); err != nil {
			return err
		}
		viol.Y.Min, viol.Y.Max = 0, top
		p50, p99, f, ra := series(r.Samples, r.Attempts, n)
		if err := addLines(lat, map[string]plotter.XYs{"p50": p50, "p99": p99}); err != nil {
			return err
		}
		if err := addLines(fails, map[string]plotter.XYs{"failed after retries": f, "503 + Retry-After (retried)": ra}); err != nil {
			return err
		}
		ftop := 1.0
		for i := range f {
			ftop = max(ftop, f[i].Y*1.15, ra[i].Y*1.15)
		}
		fails.Y.Min, fails.Y.Max = 0, ftop
		for _, p := range []*plot.Plot{viol, lat, fails} {
			p.X.Min, p.X.Max = 0, float64(n)*bucket.Seconds()
			p.Legend.Top = true
			markFaults(p, r)
		}
		rows = append(rows, []*plot.Plot{viol}, []*plot.Plot{lat}, []*plot.Plot{fails})
	}
	return draw2png(path, rows)
}

// markFaults draws each fault's start (dashed, named at the top) and
// heal (solid) as vertical lines.
func markFaults(p *plot.Plot, r *chaos.Result) {
	p.Add(plotter.NewGrid())
	lo, hi := p.Y.Min, p.Y.Max
	if lo <= 0 {
		lo = 0.001
	}
	for _, e := range r.Events {
		if e.Fault == "" {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: e.At.Seconds(), Y: lo}, {X: e.At.Seconds(), Y: hi}})
		if err != nil {
			continue
		}
		l.Color = color.Gray{Y: 110}
		if !e.Heal {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			if labels, err := plotter.NewLabels(plotter.XYLabels{
				XYs: []plotter.XY{{X: e.At.Seconds(), Y: hi}}, Labels: []string{shortFault(e)},
			}); err == nil {
				p.Add(labels)
			}
		}
		p.Add(l)
	}
}

// shortFault names a fault's start in a few characters ("KILL 2").
func shortFault(e chaos.Event) string {
	name := map[chaos.FaultKind]string{chaos.KillServer: "KILL", chaos.TermServer: "TERM", chaos.FreezeServer: "STOP",
		chaos.Partition: "PART", chaos.SlowServer: "SLOW", chaos.KillReplica: "EXT", chaos.KillAllReplicas: "EXT*"}[e.Fault]
	fields := strings.Fields(e.Text)
	for _, f := range fields {
		if strings.HasPrefix(f, "kube-apiserver-") {
			name += " " + strings.TrimPrefix(f, "kube-apiserver-")
		}
	}
	return name
}
