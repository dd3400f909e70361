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
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// CPUProfile is a CPU profile of one kube-apiserver taken while a
// proxied workload ran: where the proxied path's time goes.
type CPUProfile struct {
	Part      string        `json:"part"` // list, watch, load
	Routing   string        `json:"routing"`
	Component string        `json:"component"`
	Role      string        `json:"role"` // source (the v1.36.3 server the client talks to), peer
	Workload  string        `json:"workload"`
	Seconds   int           `json:"seconds"`
	File      string        `json:"file"`
	Took      time.Duration `json:"took"`
}

// maxWorkWhileProfiling bounds the workload loop of profileWhile.
const maxWorkWhileProfiling = 100000

// profileWhile takes CPU profiles of the path's source and peer servers
// for seconds while work runs in a loop, and saves them into dir.
func profileWhile(ctx context.Context, p *Path, part, workload string, seconds int, dir string, work func() error) ([]CPUProfile, error) {
	pl := p.plane
	roles := []struct {
		role   string
		server int
	}{{"source", p.server}, {"peer", pl.serverOf(NewVersion)}}
	out := make([]CPUProfile, len(roles))
	errs := make([]error, len(roles))
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i, r := range roles {
		srv := pl.C.Servers()[r.server]
		out[i] = CPUProfile{Part: part, Routing: p.Routing, Component: srv.Name, Role: r.role, Workload: workload, Seconds: seconds,
			File: fmt.Sprintf("cpu-%s-%s-%s.pb.gz", part, p.Routing, r.role)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := pl.C.AdminConfig(r.server)
			client, err := httpClient(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			defer client.CloseIdleConnections()
			pctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+60)*time.Second)
			defer cancel()
			body, err := do(pctx, client, http.MethodGet, url(cfg, "/debug/pprof/profile?seconds="+strconv.Itoa(seconds)), nil, http.StatusOK)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, out[i].File), body, 0o644)
			}
			errs[i] = err
		}()
	}
	go func() { wg.Wait(); close(done) }()
	start := time.Now()
	var workErr error
loop:
	for range maxWorkWhileProfiling {
		select {
		case <-done:
			break loop
		default:
		}
		if err := work(); err != nil {
			workErr = err
			break
		}
	}
	<-done
	for i := range out {
		out[i].Took = time.Since(start)
	}
	return out, errors.Join(append(errs, workErr)...)
}
