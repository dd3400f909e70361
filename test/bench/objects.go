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
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"k8s.io/client-go/rest"
)

// The objects: StorageVersionMigrations, served by v1.37.2 only.
const (
	svmPath = "/apis/storagemigration.k8s.io/v1/storageversionmigrations"
	// labelKey tells the bench's objects apart: list, watch, get.
	labelKey = "bench.peerdiscovery.k8s.io/set"
	padKey   = "bench.peerdiscovery.k8s.io/pad"
	seqKey   = "bench.peerdiscovery.k8s.io/seq"
)

// svm is a StorageVersionMigration named name in set, padded with an
// annotation of pad bytes.
func svm(name, set string, pad int) []byte {
	meta := map[string]any{"name": name, "labels": map[string]string{labelKey: set}}
	if pad > 0 {
		meta["annotations"] = map[string]string{padKey: padding(name, pad)}
	}
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
		"metadata": meta,
		"spec":     map[string]any{"resource": map[string]string{"group": "", "resource": "configmaps"}},
	})
	return b
}

// padding is n hex digits derived from name: about as compressible as
// an object's own fields (gzip halves it), where a repeated character
// would make a gzip LIST a hundred times smaller than any real one.
func padding(name string, n int) string {
	var b strings.Builder
	sum := sha256.Sum256([]byte(name))
	for b.Len() < n {
		b.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()[:n]
}

// do makes one request and reads the whole answer; any status but want
// is an error.
func do(ctx context.Context, client *http.Client, method, u string, body []byte, want int, headers ...string) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return out, fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, truncate(out, 300))
	}
	return out, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// padFor is the padding that makes a set's objects about size bytes as
// the server returns them: one object is created, read and deleted.
func padFor(ctx context.Context, cfg *rest.Config, size int) (int, error) {
	client, err := httpClient(cfg)
	if err != nil {
		return 0, err
	}
	const name = "bench-calibrate"
	if _, err := do(ctx, client, http.MethodPost, url(cfg, svmPath), svm(name, "calibrate", 0), http.StatusCreated); err != nil {
		return 0, err
	}
	got, err := do(ctx, client, http.MethodGet, url(cfg, svmPath+"/"+name), nil, http.StatusOK)
	if err != nil {
		return 0, err
	}
	if _, err := do(ctx, client, http.MethodDelete, url(cfg, svmPath+"/"+name), nil, http.StatusOK); err != nil {
		return 0, err
	}
	// The name and the annotation's key and quotes are part of it.
	return max(size-len(bytes.TrimSpace(got))-len(`,"annotations":{"`+padKey+`":""}`), 0), nil
}

// createSVMs creates n objects named <set>-<i> of set, padded by pad,
// with concurrency workers; it gives up when ctx ends. An object that
// exists already (a rerun) is fine.
func createSVMs(ctx context.Context, cfg *rest.Config, set string, n, pad, workers int) error {
	client, err := httpClient(cfg)
	if err != nil {
		return err
	}
	var next atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return nil
				}
				body := svm(fmt.Sprintf("%s-%05d", set, i), set, pad)
				if _, err := do(ctx, client, http.MethodPost, url(cfg, svmPath), body, http.StatusCreated); err != nil && !strings.Contains(err.Error(), ": 409 ") {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// listCount is how many objects of set a LIST on cfg's server returns,
// and the list's resourceVersion.
func listCount(ctx context.Context, cfg *rest.Config, set string) (int, string, error) {
	client, err := httpClient(cfg)
	if err != nil {
		return 0, "", err
	}
	body, err := do(ctx, client, http.MethodGet, url(cfg, svmPath+"?labelSelector="+labelKey+"%3D"+set), nil, http.StatusOK)
	if err != nil {
		return 0, "", err
	}
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, "", err
	}
	return len(l.Items), l.Metadata.ResourceVersion, nil
}

// sampler reads a value every interval until stopped, and keeps the
// samples.
type sampler struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(interval time.Duration, read func() (float64, error)) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if v, err := read(); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, v)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops the sampler and returns the maximum and mean of its samples.
func (s *sampler) end() (peak, mean float64) {
	close(s.stop)
	<-s.done
	for _, v := range s.samples {
		peak = max(peak, v)
		mean += v
	}
	if len(s.samples) > 0 {
		mean /= float64(len(s.samples))
	}
	return peak, mean
}
