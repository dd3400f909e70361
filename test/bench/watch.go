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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"k8s.io/client-go/rest"
)

// WatchPhase is one path's WATCH measurement.
type WatchPhase struct {
	Path     string `json:"path"`
	Watchers int    `json:"watchers"`
	// Changes were sent, Acked acknowledged; Skipped found every writer
	// busy (the rate was not kept).
	Changes int `json:"changes"`
	Acked   int `json:"acked"`
	Skipped int `json:"skipped"`
	// Dropped watchers: their stream ended or failed before the end, or
	// an acknowledged change never reached them; Missing deliveries
	// overall, Duplicates seen twice.
	Dropped    int      `json:"dropped"`
	DropErrors []string `json:"dropErrors,omitempty"`
	Missing    int      `json:"missing"`
	Duplicates int      `json:"duplicates"`
	// Latency from each write's acknowledgement to its delivery to each
	// watcher (negative: delivered before the writer saw the answer);
	// Quantiles are the 0th..100th percentiles, then the 99.9th.
	P50       time.Duration   `json:"p50"`
	P99       time.Duration   `json:"p99"`
	Max       time.Duration   `json:"max"`
	Quantiles []time.Duration `json:"quantiles"`
	// RSS of the server the watchers are connected to (the source) and
	// of the one writes go to (the peer, for a proxied path): before the
	// watchers connected, and the peak while they watched; CPU time used
	// over the phase.
	SourceRSSBefore float64       `json:"sourceRSSBefore"`
	SourceRSSPeak   float64       `json:"sourceRSSPeak"`
	PeerRSSPeak     float64       `json:"peerRSSPeak"`
	SourceCPU       time.Duration `json:"sourceCPU"`
	PeerCPU         time.Duration `json:"peerCPU"`
	Took            time.Duration `json:"took"`
	// Profiles of a proxied path's servers while the changes flow.
	Profiles []CPUProfile `json:"profiles,omitempty"`
}

// cpuPerDelivery is the kube-apiservers' CPU time per event delivered,
// in µs: the source's, and the peer's on a proxied path (on a direct
// path the peer is the source).
func (w WatchPhase) cpuPerDelivery() string {
	delivered := w.Acked*w.Watchers - w.Missing
	if delivered <= 0 {
		return "–"
	}
	cpu := w.SourceCPU
	if strings.HasSuffix(w.Path, "/proxied") {
		cpu += w.PeerCPU
	}
	return fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(delivered))
}

// watchersPerConnection spreads the watchers over connections, as many
// clients would, instead of multiplexing all of them on one.
const watchersPerConnection = 50

// RunWatch seeds every plane with the watched objects, then measures each
// path in turn.
func RunWatch(ctx context.Context, planes []*Plane, paths []*Path, s Scale, dir string, logf func(string, ...any)) ([]WatchPhase, error) {
	for _, pl := range planes {
		if err := createSVMs(ctx, pl.C.AdminConfig(pl.serverOf(NewVersion)), "watch", s.WatchObjects, 0, 4); err != nil {
			return nil, fmt.Errorf("%s: creating the watched objects: %w", pl.Routing, err)
		}
	}
	var out []WatchPhase
	for _, p := range paths {
		ph, err := watchPhase(ctx, p, s, dir)
		if err != nil {
			return out, fmt.Errorf("WATCH %s: %w", p.Name(), err)
		}
		logf("WATCH %s: p50 %s p99 %s, %d dropped, %d missing, source RSS peak %.0f MiB",
			p.Name(), ph.P50, ph.P99, ph.Dropped, ph.Missing, ph.SourceRSSPeak/(1<<20))
		out = append(out, ph)
		// Let the ended watches go before the next phase.
		time.Sleep(5 * time.Second)
	}
	return out, nil
}

type watcher struct {
	recv []atomic.Int64 // per change: nanoseconds since base when delivered (0: not yet)
	dups int
	err  error // why the stream ended early
}

func watchPhase(ctx context.Context, p *Path, s Scale, dir string) (ph WatchPhase, err error) {
	ph = WatchPhase{Path: p.Name(), Watchers: s.Watchers}
	writeServer := p.plane.serverOf(NewVersion)
	writeCfg := p.plane.C.AdminConfig(writeServer)
	var rv string
	_, rv, err = listCount(ctx, writeCfg, "watch")
	if err != nil {
		return ph, err
	}
	n := s.WatchRate * int(s.WatchDuration/time.Second)
	srcPID, _ := p.plane.C.ServerPID(p.server)
	peerPID, _ := p.plane.C.ServerPID(writeServer)
	if ph.SourceRSSBefore, err = rssBytes(srcPID); err != nil {
		return ph, err
	}
	srcRSS := startSampler(250*time.Millisecond, func() (float64, error) { return rssBytes(srcPID) })
	peerRSS := startSampler(250*time.Millisecond, func() (float64, error) { return rssBytes(peerPID) })
	// ph is the named result: the peaks land in what is returned.
	defer func() {
		ph.SourceRSSPeak, _ = srcRSS.end()
		ph.PeerRSSPeak, _ = peerRSS.end()
	}()

	base := time.Now()
	since := func() int64 { return int64(time.Since(base)) }
	wctx, stop := context.WithTimeout(ctx, s.WatchDuration+3*time.Minute)
	defer stop()
	ws := make([]*watcher, s.Watchers)
	var clients []*http.Client
	q := neturl.Values{"watch": {"1"}, "labelSelector": {labelKey + "=watch"}, "resourceVersion": {rv},
		"timeoutSeconds": {strconv.Itoa(int((s.WatchDuration + 3*time.Minute).Seconds()))}}
	u := url(p.Config(), svmPath+"?"+q.Encode())
	var done sync.WaitGroup
	open, octx := errgroup.WithContext(wctx)
	open.SetLimit(50)
	for i := range ws {
		if i%watchersPerConnection == 0 {
			c, err := httpClient(p.Config())
			if err != nil {
				return ph, err
			}
			clients = append(clients, c)
		}
		client := clients[len(clients)-1]
		w := &watcher{recv: make([]atomic.Int64, n)}
		ws[i] = w
		open.Go(func() error {
			req, err := http.NewRequestWithContext(wctx, http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Accept", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				return fmt.Errorf("watch: %d", resp.StatusCode)
			}
			done.Add(1)
			go func() {
				defer done.Done()
				defer resp.Body.Close()
				w.read(resp, since, wctx)
			}()
			return octx.Err()
		})
	}
	if err := open.Wait(); err != nil {
		stop()
		done.Wait()
		return ph, fmt.Errorf("opening %d watches: %w", s.Watchers, err)
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()

	srcCPU0, _ := cpuTime(srcPID)
	peerCPU0, _ := cpuTime(peerPID)
	start := time.Now()
	var profiling sync.WaitGroup
	var profErr error
	if secs := min(s.ProfileSeconds, int(s.WatchDuration.Seconds()/2)); p.Mode == "proxied" && secs > 0 {
		profiling.Add(1)
		go func() {
			defer profiling.Done()
			ph.Profiles, profErr = profileWhile(wctx, p, "watch", fmt.Sprintf("%d watchers, %d changes/s", s.Watchers, s.WatchRate), secs, dir,
				func() error { time.Sleep(100 * time.Millisecond); return nil })
		}()
	}
	ack := write(wctx, writeCfg, s, n, since, &ph)
	profiling.Wait()
	if profErr != nil {
		stop()
		done.Wait()
		return ph, fmt.Errorf("profiling: %w", profErr)
	}
	// Every acknowledged change should reach every watcher: wait for the
	// stragglers, bounded.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !allDelivered(ws, ack) {
		time.Sleep(100 * time.Millisecond)
	}
	ph.Took = time.Since(start)
	srcCPU1, _ := cpuTime(srcPID)
	peerCPU1, _ := cpuTime(peerPID)
	ph.SourceCPU, ph.PeerCPU = srcCPU1-srcCPU0, peerCPU1-peerCPU0
	stop()
	done.Wait()

	lat := make([]int64, 0, len(ws)*ph.Acked)
	for _, w := range ws {
		missing := 0
		for i, a := range ack {
			if a == 0 {
				continue
			}
			r := w.recv[i].Load()
			if r == 0 {
				missing++
				continue
			}
			lat = append(lat, r-a)
		}
		ph.Missing += missing
		ph.Duplicates += w.dups
		if w.err != nil || missing > 0 {
			ph.Dropped++
			if w.err != nil && len(ph.DropErrors) < 5 {
				ph.DropErrors = append(ph.DropErrors, w.err.Error())
			}
		}
	}
	if len(lat) == 0 {
		return ph, errors.New("no change was delivered")
	}
	slices.Sort(lat)
	q101 := func(f float64) time.Duration { return time.Duration(lat[min(len(lat)-1, int(f*float64(len(lat))))]) }
	for i := 0; i <= 100; i++ {
		ph.Quantiles = append(ph.Quantiles, q101(float64(i)/100))
	}
	ph.Quantiles = append(ph.Quantiles, q101(0.999))
	ph.P50, ph.P99, ph.Max = q101(0.5), q101(0.99), time.Duration(lat[len(lat)-1])
	return ph, nil
}

// seqMarker starts the sequence annotation's value in a JSON watch event
// (managedFields name the key as "f:...", which does not match).
var seqMarker = []byte(`"` + seqKey + `":"`)

// read records when each change arrives, until the stream ends.
func (w *watcher) read(resp *http.Response, since func() int64, ctx context.Context) {
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var long []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				w.err = fmt.Errorf("the watch ended: %w", err)
			}
			return
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		now := since()
		if bytes.HasPrefix(line, []byte(`{"type":"ERROR"`)) {
			w.err = fmt.Errorf("watch error event: %s", truncate(line, 300))
			return
		}
		i := bytes.Index(line, seqMarker)
		if i < 0 {
			continue
		}
		rest := line[i+len(seqMarker):]
		j := bytes.IndexByte(rest, '"')
		seq, perr := strconv.Atoi(string(rest[:max(j, 0)]))
		if perr != nil || seq < 0 || seq >= len(w.recv) {
			continue
		}
		if !w.recv[seq].CompareAndSwap(0, now) {
			w.dups++
		}
	}
}

// allDelivered reports whether every acknowledged change reached every
// watcher.
func allDelivered(ws []*watcher, ack []int64) bool {
	for _, w := range ws {
		for i, a := range ack {
			if a != 0 && w.recv[i].Load() == 0 {
				return false
			}
		}
	}
	return true
}

// writerWorkers bounds the writes in flight.
const writerWorkers = 8

// write sends n changes at the scale's rate, each a merge patch of one
// watched object's sequence annotation through cfg's server, and returns
// when each was acknowledged (nanoseconds since base; 0: not
// acknowledged). A tick that finds every writer busy is skipped.
func write(ctx context.Context, cfg *rest.Config, s Scale, n int, since func() int64, ph *WatchPhase) []int64 {
	ack := make([]int64, n)
	client, err := httpClient(cfg)
	if err != nil {
		return ack
	}
	defer client.CloseIdleConnections()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range writerWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				body := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, seqKey, i)
				name := fmt.Sprintf("watch-%05d", i%s.WatchObjects)
				if _, err := do(ctx, client, http.MethodPatch, url(cfg, svmPath+"/"+name), []byte(body), http.StatusOK,
					"Content-Type", "application/merge-patch+json"); err == nil {
					ack[i] = since()
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(s.WatchRate))
	defer tick.Stop()
loop:
	for i := range n {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		select {
		case jobs <- i:
			ph.Changes++
		default:
			ph.Skipped++
		}
	}
	close(jobs)
	wg.Wait()
	for _, a := range ack {
		if a != 0 {
			ph.Acked++
		}
	}
	return ack
}
