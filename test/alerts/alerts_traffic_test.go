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

package alerts

import (
	"context"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// traffic lists one collection again and again, every interval, for at
// most max, and counts the answers by status code.
type traffic struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	codes  map[int]int
}

func startTraffic(t *testing.T, cfg *rest.Config, path string, interval, max time.Duration) *traffic {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 10 * time.Second
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max)
	tr := &traffic{cancel: cancel, done: make(chan struct{}), codes: map[int]int{}}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n := 0; n < int(max/interval); n++ {
			code := 0
			if req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path+"?limit=10", nil); err == nil {
				if resp, err := client.Do(req); err == nil {
					code = resp.StatusCode
					resp.Body.Close()
				}
			}
			tr.mu.Lock()
			tr.codes[code]++
			tr.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { tr.stop() })
	return tr
}

// snapshot returns the answers by status so far.
func (tr *traffic) snapshot() map[int]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.codes)
}

// stop ends the load and returns the answers by status (0: no answer).
func (tr *traffic) stop() map[int]int {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.codes)
}
