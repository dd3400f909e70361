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
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

// LoadStep is one path at one concurrency for one step.
type LoadStep struct {
	Path        string        `json:"path"`
	Concurrency int           `json:"concurrency"`
	Round       int           `json:"round"`
	Requests    int           `json:"requests"`
	Errors      int           `json:"errors"`
	FirstError  string        `json:"firstError,omitempty"`
	RPS         float64       `json:"rps"`
	P50         time.Duration `json:"p50"`
	P99         time.Duration `json:"p99"`
	// CPU is the CPU time each process on the request's way used from
	// the step's start (after the warm-up) until its last request ended.
	CPU *StepCPU `json:"cpu,omitempty"`
}

// StepCPU is the CPU time used in a load step by the server the client
// talks to, the server that answers (the same one on a direct path),
// etcd, and the client (this process).
type StepCPU struct {
	Source time.Duration `json:"source"`
	Peer   time.Duration `json:"peer,omitempty"`
	Etcd   time.Duration `json:"etcd"`
	Client time.Duration `json:"client"`
}

// Total is the CPU time every process on the way used.
func (c StepCPU) Total() time.Duration { return c.Source + c.Peer + c.Etcd + c.Client }

// PerRequestOK is st's CPU time per request, in each process (false
// without CPU times or requests, or for a nil st).
func (st *LoadStep) PerRequestOK() (StepCPU, bool) {
	if st == nil || st.CPU == nil || st.Requests == 0 {
		return StepCPU{}, false
	}
	n := time.Duration(st.Requests)
	return StepCPU{Source: st.CPU.Source / n, Peer: st.CPU.Peer / n, Etcd: st.CPU.Etcd / n, Client: st.CPU.Client / n}, true
}

// stepPIDs are the processes a path's requests run through, in
// StepCPU's order; peer is 0 on a direct path.
func stepPIDs(p *Path) ([4]int, error) {
	var pids [4]int
	var err error
	if pids[0], err = p.plane.C.ServerPID(p.server); err != nil {
		return pids, err
	}
	if p.Mode == "proxied" {
		if pids[1], err = p.plane.C.ServerPID(p.plane.serverOf(NewVersion)); err != nil {
			return pids, err
		}
	}
	pids[2], pids[3] = p.plane.C.EtcdPID(), os.Getpid()
	return pids, nil
}

// cpuTimes are the CPU times of pids (0 for a pid of 0).
func cpuTimes(pids [4]int) ([4]time.Duration, error) {
	var out [4]time.Duration
	for k, pid := range pids {
		if pid == 0 {
			continue
		}
		var err error
		if out[k], err = cpuTime(pid); err != nil {
			return out, err
		}
	}
	return out, nil
}

// loadTarget is the object every GET of the full load reads.
const loadTarget = "get-00000"

// maxRequestsPerWorker bounds a worker's loop in count (the step bounds it
// in time).
const maxRequestsPerWorker = 200000

// RunLoad creates the target object on every plane, then for each round
// and concurrency runs each path in turn (rotated) for one step: c workers,
// each with its own connection, GET the object in a closed loop.
func RunLoad(ctx context.Context, planes []*Plane, paths []*Path, s Scale, dir string, logf func(string, ...any)) ([]LoadStep, []CPUProfile, error) {
	for _, pl := range planes {
		if err := createSVMs(ctx, pl.C.AdminConfig(pl.serverOf(NewVersion)), "get", 1, 0, 1); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", pl.Routing, err)
		}
	}
	maxC := slices.Max(s.LoadConcurrency)
	clients := map[*Path][]*http.Client{}
	for _, p := range paths {
		for range maxC {
			c, err := httpClient(p.Config())
			if err != nil {
				return nil, nil, err
			}
			clients[p] = append(clients[p], c)
		}
	}
	defer func() {
		for _, cs := range clients {
			for _, c := range cs {
				c.CloseIdleConnections()
			}
		}
	}()
	var out []LoadStep
	for round := range s.LoadRounds {
		for k, c := range s.LoadConcurrency {
			for _, p := range rotate(paths, round+k) {
				st, err := loadStep(ctx, p, clients[p][:c], s.LoadStep)
				if err != nil {
					return out, nil, err
				}
				st.Round = round
				out = append(out, st)
			}
			logf("load round %d c=%d done", round+1, c)
		}
	}
	var profs []CPUProfile
	if s.ProfileSeconds > 0 {
		for _, p := range paths {
			if p.Mode != "proxied" {
				continue
			}
			pr, err := profileWhile(ctx, p, "load", fmt.Sprintf("GETs at c=%d", maxC), s.ProfileSeconds, dir, func() error {
				st, err := loadStep(ctx, p, clients[p], time.Second)
				if err == nil && st.Errors > 0 {
					err = errors.New(st.FirstError)
				}
				return err
			})
			if err != nil {
				return out, profs, fmt.Errorf("profiling %s: %w", p.Name(), err)
			}
			profs = append(profs, pr...)
		}
	}
	return out, profs, nil
}

// loadStep runs len(clients) workers for step (after a short warm-up that
// is not counted) and returns the throughput and latencies.
func loadStep(ctx context.Context, p *Path, clients []*http.Client, step time.Duration) (LoadStep, error) {
	st := LoadStep{Path: p.Name(), Concurrency: len(clients)}
	u := url(p.Config(), svmPath+"/"+loadTarget)
	pids, err := stepPIDs(p)
	if err != nil {
		return st, err
	}
	warm := min(step/4, time.Second)
	start := time.Now()
	measureFrom, end := start.Add(warm), start.Add(warm+step)
	var cpu0 [4]time.Duration
	var cpu0Err error
	cpu0Read := make(chan struct{})
	cpuStart := time.AfterFunc(warm, func() {
		defer close(cpu0Read)
		cpu0, cpu0Err = cpuTimes(pids)
	})
	lats := make([][]time.Duration, len(clients))
	errs := make([]int, len(clients))
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for w, client := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for range maxRequestsPerWorker {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					return
				}
				err := getOnce(ctx, client, u, buf)
				t1 := time.Now()
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs[w]++
					errOnce.Do(func() { firstErr = err })
					continue
				}
				// A request that ends after the step is still counted: it
				// was running during it, and dropping it would hide the
				// slowest ones.
				lats[w] = append(lats[w], t1.Sub(t0))
			}
		}()
	}
	wg.Wait()
	if !cpuStart.Stop() { // it ran: the step lasted past the warm-up
		<-cpu0Read
		cpu1, err := cpuTimes(pids)
		if err = errors.Join(cpu0Err, err); err != nil {
			return st, err
		}
		st.CPU = &StepCPU{Source: cpu1[0] - cpu0[0], Peer: cpu1[1] - cpu0[1], Etcd: cpu1[2] - cpu0[2], Client: cpu1[3] - cpu0[3]}
	}
	var all []time.Duration
	for w := range lats {
		all = append(all, lats[w]...)
		st.Errors += errs[w]
	}
	if firstErr != nil {
		st.FirstError = firstErr.Error()
	}
	st.Requests = len(all)
	st.RPS = float64(len(all)) / step.Seconds()
	if len(all) > 0 {
		slices.Sort(all)
		st.P50 = all[len(all)/2]
		st.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return st, nil
}

func getOnce(ctx context.Context, client *http.Client, u string, buf []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.CopyBuffer(io.Discard, resp.Body, buf); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET: %d", resp.StatusCode)
	}
	return nil
}

// MaxRPS is, per path, the highest throughput of a step whose p99 stayed
// under bound and that had no errors (0 when none did); steps of the same
// concurrency in several rounds are combined by taking the lower
// throughput and the higher p99, so one lucky round does not count.
func MaxRPS(steps []LoadStep, bound time.Duration) map[string]float64 {
	type key struct {
		path string
		c    int
	}
	worst := map[key]LoadStep{}
	for _, s := range steps {
		k := key{s.Path, s.Concurrency}
		w, ok := worst[k]
		if !ok {
			worst[k] = s
			continue
		}
		w.RPS, w.P99, w.Errors = min(w.RPS, s.RPS), max(w.P99, s.P99), w.Errors+s.Errors
		worst[k] = w
	}
	out := map[string]float64{}
	for k, s := range worst {
		if _, ok := out[k.path]; !ok {
			out[k.path] = 0
		}
		if s.P99 < bound && s.Errors == 0 && s.RPS > out[k.path] {
			out[k.path] = s.RPS
		}
	}
	return out
}
