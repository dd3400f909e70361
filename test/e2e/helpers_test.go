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

package e2e

import (
	"bytes"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// pd is a peerdiscovery.k8s.io client through kube-apiserver i.
func pd(t *testing.T, i int) versioned.Interface {
	t.Helper()
	return planetest.Client(t, cluster.AdminConfig(i))
}

// discovery fetches server i's /apis (or /api) aggregated document.
func discovery(t *testing.T, i int, path string, nopeer bool) ([]apidiscoveryv2.APIGroupDiscovery, string, []byte) {
	t.Helper()
	return planetest.Aggregated(t, cluster.AdminConfig(i), path, nopeer)
}

// review asks RouteReview through kube-apiserver i.
func review(t *testing.T, i int, verb, path, source string) v1alpha1.RouteReviewStatus {
	t.Helper()
	return planetest.Review(t, cluster.AdminConfig(i), verb, path, source)
}

func sortedGVRs(s map[schema.GroupVersionResource]bool) []string {
	var out []string
	for gvr := range s {
		out = append(out, gvr.String())
	}
	sort.Strings(out)
	return out
}

// scrape reads a component's /metrics: samples by name, then by label set
// as written (`a="x",b="y"`, "" for none).
func scrape(t *testing.T, cfg *rest.Config) map[string]map[string]float64 {
	t.Helper()
	code, _, body := planetest.Get(t, cfg, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s/metrics: %d", cfg.Host, code)
	}
	out := map[string]map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if end := strings.LastIndex(line, "} "); end >= 0 {
			series, value, ok = line[:end+1], line[end+2:], true
		}
		if !ok {
			continue
		}
		name, labels, _ := strings.Cut(series, "{")
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			continue
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][strings.TrimSuffix(labels, "}")] = v
	}
	return out
}

// sumMetric sums metric name on kube-apiserver i over the label sets that
// contain every one of labels (`group="x"`).
func sumMetric(t *testing.T, i int, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for set, v := range scrape(t, cluster.AdminConfig(i))[name] {
		match := true
		for _, l := range labels {
			match = match && strings.Contains(set, l)
		}
		if match {
			sum += v
		}
	}
	return sum
}

// rerouted sums apiserver_rerouted_request_total on server i for a resource.
func rerouted(t *testing.T, i int, group, resource string) float64 {
	t.Helper()
	return sumMetric(t, i, "apiserver_rerouted_request_total", `group="`+group+`"`, `resource="`+resource+`"`)
}

// syncBuffer is a bytes.Buffer safe for a writer process and a reader test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
