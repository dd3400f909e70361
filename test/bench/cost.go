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
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ProcessCost is one process over one window.
type ProcessCost struct {
	Routing   string `json:"routing"`
	Component string `json:"component"` // kube-apiserver-<i>, peerdiscovery-apiserver-0
	Version   string `json:"version,omitempty"`
	// RSS is the mean of one sample per second over the window.
	RSS float64       `json:"rss"`
	CPU time.Duration `json:"cpu"` // used over the window
	// HeapProfile is the file (in the output folder) of the heap profile
	// taken after the window, after a GC (kube-apiservers only).
	HeapProfile string `json:"heapProfile,omitempty"`
	// Go is the Go runtime's memory at the window's end, before that GC
	// (kube-apiservers only): what of the RSS is heap in use, and what the
	// runtime holds idle without returning it to the OS.
	Go *GoMemory `json:"go,omitempty"`
}

// GoMemory is a process's go_memstats at one moment, in bytes.
type GoMemory struct {
	HeapInuse    float64 `json:"heapInuse"`
	HeapIdle     float64 `json:"heapIdle"`
	HeapReleased float64 `json:"heapReleased"`
	// NextGC is the heap size at which the next GC starts.
	NextGC float64 `json:"nextGC"`
}

// CostState is every process of both planes in one state.
type CostState struct {
	Name      string        `json:"name"`
	CRDs      int           `json:"crds"`
	StubGVRs  int           `json:"stubGVRs"`
	Window    time.Duration `json:"window"`
	Processes []ProcessCost `json:"processes"`
}

// CostResult is the filter's own cost.
type CostResult struct {
	Servers    []string `json:"servers"`
	GVRsWanted int      `json:"gvrsWanted"`
	CRDsWanted int      `json:"crdsWanted"`
	CRDs       int      `json:"crds"`
	CRDsNote   string   `json:"crdsNote,omitempty"` // why fewer were made
	// StubGVRs are the aggregated APIServices' resources added after.
	StubGVRs int           `json:"stubGVRs"`
	CRDsTook time.Duration `json:"crdsTook"`
	StubTook time.Duration `json:"stubTook"`
	States   []CostState   `json:"states"`
}

// MeasureCost samples every kube-apiserver (and peerdiscovery-apiserver)
// of both planes at once over the scale's window, then takes each
// kube-apiserver's heap profile after a GC into dir.
func MeasureCost(ctx context.Context, planes []*Plane, s Scale, name string, crds, stubGVRs int, dir string) (CostState, error) {
	st := CostState{Name: name, CRDs: crds, StubGVRs: stubGVRs, Window: s.CostWindow}
	type proc struct {
		cost ProcessCost
		pid  int
		cpu0 time.Duration
		rss  *sampler
	}
	var procs []*proc
	for _, pl := range planes {
		for i, srv := range pl.C.Servers() {
			pid, err := pl.C.ServerPID(i)
			if err != nil || pid == 0 {
				return st, fmt.Errorf("%s %s is not running", pl.Routing, srv.Name)
			}
			procs = append(procs, &proc{cost: ProcessCost{Routing: pl.Routing.String(), Component: srv.Name, Version: srv.Version}, pid: pid})
		}
		for i, e := range pl.C.Extensions() {
			pid, err := pl.C.ExtensionPID(i)
			if err != nil || pid == 0 {
				return st, fmt.Errorf("%s %s is not running", pl.Routing, e.Name)
			}
			procs = append(procs, &proc{cost: ProcessCost{Routing: pl.Routing.String(), Component: e.Name}, pid: pid})
		}
	}
	for _, p := range procs {
		p.cpu0, _ = cpuTime(p.pid)
		p.rss = startSampler(time.Second, func() (float64, error) { return rssBytes(p.pid) })
	}
	select {
	case <-ctx.Done():
	case <-time.After(s.CostWindow):
	}
	for _, p := range procs {
		cpu1, err := cpuTime(p.pid)
		if err != nil {
			return st, fmt.Errorf("%s %s: %w", p.cost.Routing, p.cost.Component, err)
		}
		p.cost.CPU = cpu1 - p.cpu0
		_, p.cost.RSS = p.rss.end()
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	// The runtime's memory first, then the profiles: the GC each profile
	// forces would show in both.
	k := 0
	for _, pl := range planes {
		for i := range pl.C.Servers() {
			m, err := goMemory(ctx, pl, i)
			if err != nil {
				return st, err
			}
			procs[k].cost.Go = m
			k++
		}
		k += len(pl.C.Extensions())
	}
	k = 0
	for _, pl := range planes {
		for i := range pl.C.Servers() {
			p := procs[k]
			k++
			file := fmt.Sprintf("heap-%s-%s-%s.pb.gz", name, p.cost.Routing, p.cost.Component)
			if err := heapProfile(ctx, pl, i, filepath.Join(dir, file)); err != nil {
				return st, err
			}
			p.cost.HeapProfile = file
		}
		k += len(pl.C.Extensions())
	}
	for _, p := range procs {
		st.Processes = append(st.Processes, p.cost)
	}
	return st, nil
}

// goMemory reads kube-apiserver i's go_memstats from /metrics.
func goMemory(ctx context.Context, pl *Plane, i int) (*GoMemory, error) {
	cfg := pl.C.AdminConfig(i)
	client, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	body, err := do(ctx, client, http.MethodGet, url(cfg, "/metrics"), nil, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("%s server %d metrics: %w", pl.Routing, i, err)
	}
	m := &GoMemory{}
	want := map[string]*float64{
		"go_memstats_heap_inuse_bytes":    &m.HeapInuse,
		"go_memstats_heap_idle_bytes":     &m.HeapIdle,
		"go_memstats_heap_released_bytes": &m.HeapReleased,
		"go_memstats_next_gc_bytes":       &m.NextGC,
	}
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if dst := want[name]; ok && dst != nil {
			if *dst, err = strconv.ParseFloat(value, 64); err != nil {
				return nil, fmt.Errorf("%s server %d metrics: %s: %w", pl.Routing, i, name, err)
			}
			delete(want, name)
		}
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("%s server %d metrics: %d go_memstats series missing", pl.Routing, i, len(want))
	}
	return m, nil
}

// heapProfile saves kube-apiserver i's heap profile, taken after a GC
// (--profiling is on by default).
func heapProfile(ctx context.Context, pl *Plane, i int, path string) error {
	cfg := pl.C.AdminConfig(i)
	client, err := httpClient(cfg)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	body, err := do(ctx, client, http.MethodGet, url(cfg, "/debug/pprof/heap?gc=1"), nil, http.StatusOK)
	if err != nil {
		return fmt.Errorf("%s server %d heap profile: %w", pl.Routing, i, err)
	}
	return os.WriteFile(path, body, 0o644)
}

// crd is the i-th CRD: one version, cluster-scoped, no schema beyond
// "keep every field" (the cheapest CRD a server can serve), perGroup to a
// group.
func crd(i int) *apiextensionsv1.CustomResourceDefinition {
	plural, kind := fmt.Sprintf("widgets%05d", i), fmt.Sprintf("Widget%05d", i)
	group := fmt.Sprintf("c%03d.%s", i/perGroup, crdSuffix)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: fmt.Sprintf("widget%05d", i), Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
}

// crdBatch is how many CRDs go to one plane before the other's turn.
const crdBatch = 50

// CreateCRDs creates up to want CRDs on every plane, a batch at a time on
// each in turn, and stops early when the host's available memory falls
// under the scale's reserve or the time bound passes. It returns how many
// every plane has and, when fewer than want, why.
func CreateCRDs(ctx context.Context, planes []*Plane, s Scale, bound time.Duration, logf func(string, ...any)) (int, string, error) {
	deadline := time.Now().Add(bound)
	var clients []apiextensionsclient.Interface
	for _, pl := range planes {
		c, err := apiextensionsclient.NewForConfig(pl.C.AdminConfig(pl.serverOf(NewVersion)))
		if err != nil {
			return 0, "", err
		}
		clients = append(clients, c)
	}
	made := 0
	for made < s.CostCRDs {
		if avail, err := memAvailable(); err == nil && avail < s.CostMemoryReserve {
			return made, fmt.Sprintf("stopped at %d CRDs: the host had %.1f GiB available, under the %.1f GiB reserve", made, float64(avail)/(1<<30), float64(s.CostMemoryReserve)/(1<<30)), nil
		}
		if time.Now().After(deadline) {
			return made, fmt.Sprintf("stopped at %d CRDs: creating them took longer than %s", made, bound), nil
		}
		n := min(crdBatch, s.CostCRDs-made)
		for _, c := range clients {
			var wg sync.WaitGroup
			errs := make([]error, n)
			for j := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd(made+j), metav1.CreateOptions{})
					if apierrors.IsAlreadyExists(err) {
						err = nil
					}
					errs[j] = err
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return made, "", err
				}
			}
		}
		made += n
		if made%500 == 0 || made == s.CostCRDs {
			logf("%d CRDs created on each plane", made)
		}
	}
	return made, "", nil
}

// WaitGVRsServed waits until every kube-apiserver of every plane lists n
// resources in the groups ending with suffix.
func WaitGVRsServed(ctx context.Context, planes []*Plane, suffix string, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for _, pl := range planes {
		for i, srv := range pl.C.Servers() {
			for {
				got, err := countGVRs(ctx, pl.C.AdminConfig(i), suffix)
				if err == nil && got == n {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s %s lists %d of %d resources of *.%s after %s (last error: %v)", pl.Routing, srv.Name, got, n, suffix, bound, err)
				}
				time.Sleep(2 * time.Second)
			}
		}
	}
	return nil
}
