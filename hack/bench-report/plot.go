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
	"image/color"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"sigs.k8s.io/peerdiscovery/test/bench"
)

// One color per path, the same in every panel: this filter in blues,
// upstream's proxy in reds; direct light, proxied dark.
var pathColors = map[string]color.Color{
	bench.PathDirect:          color.RGBA{R: 158, G: 202, B: 225, A: 255},
	bench.PathProxied:         color.RGBA{R: 33, G: 113, B: 181, A: 255},
	bench.PathUpstreamDirect:  color.RGBA{R: 252, G: 174, B: 145, A: 255},
	bench.PathUpstreamProxied: color.RGBA{R: 203, G: 24, B: 29, A: 255},
}

// drawReport writes one PNG with a panel per measurement the run has.
func drawReport(path string, res *bench.Result) error {
	var panels []*plot.Plot
	add := func(p *plot.Plot, err error) error {
		if err != nil {
			return err
		}
		panels = append(panels, p)
		return nil
	}
	if res.List != nil {
		if err := add(listPanel(res.List)); err != nil {
			return err
		}
	}
	if len(res.Watch) > 0 {
		if err := add(watchPanel(res.Watch)); err != nil {
			return err
		}
	}
	if len(res.Load) > 0 {
		if err := add(loadPanel(res.Load)); err != nil {
			return err
		}
	}
	if res.Cost != nil && len(res.Cost.States) > 0 {
		if err := add(costPanel(res.Cost)); err != nil {
			return err
		}
	}
	if len(panels) == 0 {
		return nil
	}
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p}
	}
	img := vgimg.New(vg.Points(1000), vg.Points(float64(320*len(rows))))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Points(8), PadY: vg.Points(16), PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
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

// bars adds one bar group per path over the categories.
func bars(p *plot.Plot, values map[string][]float64, names []string) error {
	w := vg.Points(14)
	for i, name := range names {
		b, err := plotter.NewBarChart(plotter.Values(values[name]), w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = pathColors[name], 0
		b.Offset = w * vg.Length(float64(i)-float64(len(names)-1)/2)
		p.Add(b)
		p.Legend.Add(name, b)
	}
	p.Legend.Top = true
	return nil
}

func listPanel(l *bench.ListResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "LIST throughput (decoded MB/s, median over rounds)"
	p.Y.Label.Text = "MB/s"
	sum := l.ListSummary()
	variants := make([]bench.ListVariant, 0, len(sum))
	for v := range sum {
		variants = append(variants, v)
	}
	slices.SortFunc(variants, func(a, b bench.ListVariant) int { return strings.Compare(a.String(), b.String()) })
	values := map[string][]float64{}
	var labels []string
	for _, v := range variants {
		labels = append(labels, v.String())
		for _, path := range bench.PathNames {
			values[path] = append(values[path], sum[v][path].MBps)
		}
	}
	if err := bars(p, values, bench.PathNames); err != nil {
		return nil, err
	}
	p.NominalX(labels...)
	return p, nil
}

func watchPanel(ws []bench.WatchPhase) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "WATCH delivery latency from the write's acknowledgement (percentiles over every watcher and change)"
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "ms"
	for _, w := range ws {
		var xys plotter.XYs
		for i, q := range w.Quantiles[:min(len(w.Quantiles), 101)] {
			if i == 0 {
				continue // the minimum can be negative: off the axis
			}
			xys = append(xys, plotter.XY{X: float64(i), Y: msf(q)})
		}
		if err := line(p, w.Path, xys); err != nil {
			return nil, err
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p, nil
}

func loadPanel(steps []bench.LoadStep) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Full load: p99 against throughput, c = 1..64 (closed loop GETs); dashed: 100 ms"
	p.X.Label.Text = "requests per second"
	p.Y.Label.Text = "p99 ms"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	byPath := map[string][]bench.LoadStep{}
	for _, s := range steps {
		if s.Round == 0 {
			byPath[s.Path] = append(byPath[s.Path], s)
		}
	}
	maxX := 1.0
	for _, name := range bench.PathNames {
		ss := byPath[name]
		slices.SortFunc(ss, func(a, b bench.LoadStep) int { return a.Concurrency - b.Concurrency })
		var xys plotter.XYs
		for _, s := range ss {
			xys = append(xys, plotter.XY{X: s.RPS, Y: max(msf(s.P99), 0.01)})
			maxX = max(maxX, s.RPS)
		}
		if err := line(p, name, xys); err != nil {
			return nil, err
		}
	}
	bound, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 100}, {X: maxX, Y: 100}})
	if err != nil {
		return nil, err
	}
	bound.Dashes, bound.Color = []vg.Length{vg.Points(4), vg.Points(3)}, color.Gray{Y: 90}
	p.Add(bound, plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

func costPanel(c *bench.CostResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "kube-apiserver RSS (MiB, mean over the servers of a release): with the filter vs plain upstream"
	p.Y.Label.Text = "MiB"
	values := map[string][]float64{}
	var labels []string
	for _, st := range c.States {
		var versions []string
		for _, pr := range st.Processes {
			if pr.Version != "" && !slices.Contains(versions, pr.Version) {
				versions = append(versions, pr.Version)
			}
		}
		slices.Sort(versions)
		for _, v := range versions {
			labels = append(labels, st.Name+" "+v)
			for _, routing := range []string{"peerdiscovery", "upstream"} {
				var sum float64
				n := 0
				for _, pr := range st.Processes {
					if pr.Routing == routing && pr.Version == v {
						sum += pr.RSS
						n++
					}
				}
				values[routing+"/proxied"] = append(values[routing+"/proxied"], sum/float64(max(n, 1))/(1<<20))
			}
		}
	}
	if err := bars(p, values, []string{bench.PathProxied, bench.PathUpstreamProxied}); err != nil {
		return nil, err
	}
	p.Legend = plot.NewLegend()
	p.Legend.Top = true
	for _, name := range []string{bench.PathProxied, bench.PathUpstreamProxied} {
		label := "plain upstream (built-in proxy on)"
		if name == bench.PathProxied {
			label = "with the filter"
		}
		p.Legend.Add(label, swatch{pathColors[name]})
	}
	p.NominalX(labels...)
	return p, nil
}

// swatch is a legend entry of one color.
type swatch struct{ c color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y}})
}

func line(p *plot.Plot, name string, xys plotter.XYs) error {
	if len(xys) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width = pathColors[name], vg.Points(1.5)
	s.Color = pathColors[name]
	p.Add(l, s)
	p.Legend.Add(name, l)
	return nil
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
