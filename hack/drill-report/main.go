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

// drill-report writes the upgrade drill's report: the Markdown table of
// the runs side by side and a PNG timeline (latency percentiles and
// failures over time, the steps marked). hack/upgrade-drill.sh runs it.
// With --chaos DIR it writes the chaos soak's timeline instead
// (hack/chaos.sh). It is a module of its own so that the plotting library
// stays out of peerdiscovery's go.mod.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"sigs.k8s.io/peerdiscovery/test/upgradedrill"
	"sigs.k8s.io/peerdiscovery/test/workload"
)

const bucket = 5 * time.Second

func main() {
	dir := flag.String("dir", "_output/upgrade-drill", "folder of the drill results (<routing>-<mode>.json)")
	mode := flag.String("mode", "full", "which drill: full or short")
	chaosDir := flag.String("chaos", "", "folder of a chaos soak (results.json): write its timeline.png and report.md there")
	summary := flag.String("chaos-summary", "", "write one table over the chaos soaks in the folders given as arguments to this file")
	flag.Parse()
	if *summary != "" {
		if err := chaosSummary(*summary, flag.Args()); err != nil {
			fail(err)
		}
		return
	}
	if *chaosDir != "" {
		if err := chaosReport(*chaosDir); err != nil {
			fail(err)
		}
		return
	}
	var results []*upgradedrill.Result
	data, err := os.ReadFile(filepath.Join(*dir, "drill-"+*mode+".json"))
	if err != nil {
		fail(err)
	}
	if err := json.Unmarshal(data, &results); err != nil {
		fail(fmt.Errorf("%s: %w", *dir, err))
	}
	if len(results) == 0 {
		fail(fmt.Errorf("no drill results in %s", *dir))
	}
	md := filepath.Join(*dir, "report-"+*mode+".md")
	if err := os.WriteFile(md, []byte(upgradedrill.Markdown(results...)), 0o644); err != nil {
		fail(err)
	}
	png := filepath.Join(*dir, "timeline-"+*mode+".png")
	if err := timeline(png, results); err != nil {
		fail(err)
	}
	fmt.Printf("%s\n%s\n", md, png)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "drill-report:", err)
	os.Exit(1)
}

// timeline draws, per run, latency (p50, p99 per 5 s) and failures per
// second (operations failed after retries; 503 attempts with Retry-After
// that client-go retried), with the steps' SIGTERM and ready marked.
func timeline(path string, results []*upgradedrill.Result) error {
	var rows [][]*plot.Plot
	for _, r := range results {
		lat, fails := plot.New(), plot.New()
		lat.Title.Text = r.Routing + ": latency of operations (watches excluded), per 5 s"
		lat.Y.Label.Text = "ms"
		lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		fails.Title.Text = r.Routing + ": per second"
		fails.X.Label.Text = "seconds since the workload started"
		n := int(r.Phases[len(r.Phases)-1].End/bucket) + 1
		p50, p99, f, ra := series(r.Samples, r.Attempts, n)
		if err := addLines(lat, map[string]plotter.XYs{"p50": p50, "p99": p99}); err != nil {
			return err
		}
		if err := addLines(fails, map[string]plotter.XYs{"failed after retries": f, "503 + Retry-After (retried)": ra}); err != nil {
			return err
		}
		top := 1.0 // a run without failures keeps a readable axis
		for i := range f {
			top = max(top, f[i].Y*1.15, ra[i].Y*1.15)
		}
		fails.Y.Min, fails.Y.Max = 0, top
		for _, p := range []*plot.Plot{lat, fails} {
			p.X.Min, p.X.Max = 0, float64(n)*bucket.Seconds()
			p.Legend.Top = true
			markSteps(p, r)
		}
		rows = append(rows, []*plot.Plot{lat}, []*plot.Plot{fails})
	}
	return draw2png(path, rows)
}

// series are, per 5 s bucket of n: latency p50 and p99 (ms, watches
// excluded), operations failed after retries per second, and 503
// attempts with Retry-After per second.
func series(samples []workload.Sample, attempts []workload.Attempt, n int) (p50, p99, failedPerSec, retriedPerSec plotter.XYs) {
	durs := make([][]time.Duration, n)
	failed, retried := make([]float64, n), make([]float64, n)
	for _, s := range samples {
		i := int(s.At / bucket)
		if i >= n {
			continue
		}
		if s.Verb != "watch" {
			durs[i] = append(durs[i], s.Took)
		}
		if s.Code != 200 {
			failed[i]++
		}
	}
	for _, a := range attempts {
		if a.Code == 503 && a.RetryAfter && int(a.At/bucket) < n {
			retried[int(a.At/bucket)]++
		}
	}
	for i := range n {
		x := (float64(i) + 0.5) * bucket.Seconds()
		if len(durs[i]) > 0 {
			slices.Sort(durs[i])
			p50 = append(p50, plotter.XY{X: x, Y: ms(durs[i][len(durs[i])/2])})
			p99 = append(p99, plotter.XY{X: x, Y: ms(durs[i][min(len(durs[i])-1, len(durs[i])*99/100)])})
		}
		failedPerSec = append(failedPerSec, plotter.XY{X: x, Y: failed[i] / bucket.Seconds()})
		retriedPerSec = append(retriedPerSec, plotter.XY{X: x, Y: retried[i] / bucket.Seconds()})
	}
	return p50, p99, failedPerSec, retriedPerSec
}

// draw2png draws the plots one per row into a PNG at path.
func draw2png(path string, rows [][]*plot.Plot) error {
	img := vgimg.New(vg.Points(1100), vg.Points(float64(260*len(rows))))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Points(8), PadY: vg.Points(12), PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(out)
	return err
}

var palette = []color.Color{color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255}}

func addLines(p *plot.Plot, series map[string]plotter.XYs) error {
	names := make([]string, 0, len(series))
	for name := range series {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		if len(series[name]) == 0 {
			continue
		}
		l, err := plotter.NewLine(series[name])
		if err != nil {
			return err
		}
		l.Color, l.Width = palette[i%len(palette)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(name, l)
	}
	return nil
}

// markSteps draws each step's SIGTERM (dashed) and ready (solid) as
// vertical lines, named at the top.
func markSteps(p *plot.Plot, r *upgradedrill.Result) {
	p.Add(plotter.NewGrid())
	lo, hi := p.Y.Min, p.Y.Max
	if lo <= 0 {
		lo = 0.001
	}
	for i, s := range r.Steps {
		for _, m := range []struct {
			at     time.Duration
			dashed bool
		}{{s.SIGTERM, true}, {s.Ready, false}} {
			l, err := plotter.NewLine(plotter.XYs{{X: m.at.Seconds(), Y: lo}, {X: m.at.Seconds(), Y: hi}})
			if err != nil {
				continue
			}
			l.Color = color.Gray{Y: 90}
			if m.dashed {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l)
		}
		labels, err := plotter.NewLabels(plotter.XYLabels{
			XYs:    []plotter.XY{{X: s.SIGTERM.Seconds(), Y: hi}},
			Labels: []string{fmt.Sprintf("%d: %s", i+1, s.Step)},
		})
		if err == nil {
			p.Add(labels)
		}
	}
}

func ms(d time.Duration) float64 { return max(float64(d)/float64(time.Millisecond), 0.01) }
