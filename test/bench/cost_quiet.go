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
	"context"
	"fmt"
	"time"
)

// PlaneQuiet is when one plane's kube-apiservers settled after a state
// change.
type PlaneQuiet struct {
	Routing string `json:"routing"`
	// After is the time from the wait's start to the first window in
	// which every server of the plane was quiet; Reached is false when
	// the bound passed first (After is then the bound).
	After   time.Duration `json:"after"`
	Reached bool          `json:"reached"`
}

// costQuietBound bounds the wait for both planes to settle (WaitQuiet)
// before each state's settle time.
const costQuietBound = 6 * time.Minute

// quietCPU and quietWindow define a settled plane: every kube-apiserver
// under quietCPU of a core over quietWindow. Idle servers use 1–3 %.
const (
	quietCPU    = 0.10
	quietWindow = 10 * time.Second
)

// WaitQuiet waits, up to bound, until the kube-apiservers of every plane
// are quiet in the same window, and tells when each plane first was.
// "Served everywhere" is not settled: a kube-apiserver builds the OpenAPI
// of a thousand CRDs (about 2 GB allocated) for minutes after it serves
// them, and the plane that the shared cores happened to serve later was
// still doing so in its next state's window, which then measured that
// backlog rather than the filter.
func WaitQuiet(ctx context.Context, planes []*Plane, bound time.Duration) ([]PlaneQuiet, error) {
	start := time.Now()
	out := make([]PlaneQuiet, len(planes))
	for k, pl := range planes {
		out[k].Routing = pl.Routing.String()
	}
	for {
		type sample struct {
			pid  int
			cpu0 time.Duration
		}
		var samples [][]sample
		for _, pl := range planes {
			var ss []sample
			for i := range pl.C.Servers() {
				pid, err := pl.C.ServerPID(i)
				if err != nil || pid == 0 {
					return out, fmt.Errorf("%s server %d is not running", pl.Routing, i)
				}
				cpu, err := cpuTime(pid)
				if err != nil {
					return out, err
				}
				ss = append(ss, sample{pid, cpu})
			}
			samples = append(samples, ss)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(quietWindow):
		}
		all := true
		for k, ss := range samples {
			quiet := true
			for _, s := range ss {
				cpu, err := cpuTime(s.pid)
				if err != nil {
					return out, err
				}
				if float64(cpu-s.cpu0) > quietCPU*float64(quietWindow) {
					quiet = false
				}
			}
			if quiet && !out[k].Reached {
				out[k].After, out[k].Reached = time.Since(start), true
			}
			all = all && quiet
		}
		if all {
			return out, nil
		}
		if time.Since(start) > bound {
			for k := range out {
				if !out[k].Reached {
					out[k].After = bound
				}
			}
			return out, nil
		}
	}
}
