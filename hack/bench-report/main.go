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

// bench-report writes the report of a test/bench run (hack/bench.sh):
// it reads the kube-apiservers' heap profiles (the live heap, and the part
// allocated under the filter's functions), then writes the Markdown
// tables and a PNG of every measurement. It is a module of its own so
// that the plotting and profile libraries stay out of peerdiscovery's
// go.mod.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/peerdiscovery/test/bench"
)

func main() {
	dir := flag.String("dir", "_output/bench", "folder of the run (result.json, heap profiles)")
	runs := flag.String("median-of", "", "folders of cost runs, comma-separated, each already reported: print each cost goal's figure in every run and the median, and nothing else")
	flag.Parse()
	if *runs != "" {
		var results []*bench.Result
		for _, d := range strings.Split(*runs, ",") {
			res, err := readResult(d)
			if err != nil {
				fail(err)
			}
			results = append(results, res)
		}
		fmt.Print(bench.MedianMarkdown(results))
		return
	}
	res, err := readResult(*dir)
	if err != nil {
		fail(err)
	}
	if res.Cost != nil {
		res.Heap = map[string]bench.HeapFigures{}
		flat := map[string]map[string]float64{}
		for _, st := range res.Cost.States {
			for _, p := range st.Processes {
				if p.HeapProfile == "" {
					continue
				}
				f, byFunction, err := heapFigures(filepath.Join(*dir, p.HeapProfile))
				if err != nil {
					fail(err)
				}
				res.Heap[p.HeapProfile], flat[p.HeapProfile] = f, byFunction
				if p.EarlyHeapProfile != "" {
					f, byFunction, err := heapFigures(filepath.Join(*dir, p.EarlyHeapProfile))
					if err != nil {
						fail(err)
					}
					res.Heap[p.EarlyHeapProfile], flat[p.EarlyHeapProfile] = f, byFunction
				}
				if p.AllocBase == "" {
					continue
				}
				f, byFunction, err = allocFigures(filepath.Join(*dir, p.AllocBase), filepath.Join(*dir, p.HeapProfile))
				if err != nil {
					fail(err)
				}
				res.Heap[p.AllocBase], flat[p.AllocBase] = f, byFunction
			}
		}
		res.HeapDiff = heapDiff(res.Cost, flat, func(p bench.ProcessCost) string { return p.HeapProfile })
		res.AllocDiff = heapDiff(res.Cost, flat, func(p bench.ProcessCost) string { return p.AllocBase })
		res.EarlyHeapDiff = heapDiff(res.Cost, flat, func(p bench.ProcessCost) string { return p.EarlyHeapProfile })
	}
	res.CPU = map[string]bench.CPUFigures{}
	for _, pr := range res.Profiles() {
		f, err := cpuFigures(filepath.Join(*dir, pr.File), pr.Routing)
		if err != nil {
			fail(err)
		}
		res.CPU[pr.File] = f
	}
	data, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "result.json"), data, 0o644); err != nil {
		fail(err)
	}
	md := filepath.Join(*dir, "report.md")
	if err := os.WriteFile(md, []byte(bench.Markdown(res)), 0o644); err != nil {
		fail(err)
	}
	png := filepath.Join(*dir, "report.png")
	if err := drawReport(png, res); err != nil {
		fail(err)
	}
	fmt.Printf("%s\n%s\n", md, png)
}

// readResult reads dir's result.json.
func readResult(dir string) (*bench.Result, error) {
	data, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		return nil, err
	}
	res := &bench.Result{}
	if err := json.Unmarshal(data, res); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return res, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-report:", err)
	os.Exit(1)
}
