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
	"fmt"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

const monitoringDir = "../../artifacts/monitoring/"

// The gauges every kube-apiserver serves, whether it proxies or not.
var everyServerMetrics = map[string]bool{
	"peerdiscovery_filter_enabled":      true,
	"peerdiscovery_filter_cache_synced": true,
	"aggregator_unavailable_apiservice": true,
}

// TestMonitoringMetrics scrapes every metric the alerts and the dashboard
// use (metrics.txt) from the real control plane's /metrics: each
// kube-apiserver for the filter's and the aggregator's, each
// peerdiscovery-apiserver replica for the engine's. On this healthy plane,
// the gauges the alerts read must say so.
func TestMonitoringMetrics(t *testing.T) {
	readyPlane(t)
	recorded := planetest.MonitoringMetrics(t, monitoringDir+"metrics.txt")

	// Counters appear with their first increment: a proxied LIST, one
	// whose deadline passes while proxying (type canceled), and a
	// discovery request the filter answers. The filter answers 503 until
	// its routing caches synced, which may be after the servers are ready.
	planetest.WaitFor(t, time.Minute, "a proxied LIST through the v1.36.3 server", func() error {
		if code, _, body := planetest.Get(t, cluster.AdminConfig(old), svmPath); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	planetest.WaitFor(t, time.Minute, "a proxy error of type canceled on the v1.36.3 server", func() error {
		_, _, _ = planetest.Get(t, cluster.AdminConfig(old), svmPath+"?timeout=1ms")
		if scrapeComponent(t, "kube-apiserver", old)["apiserver_peer_proxy_errors_total"] == nil {
			return fmt.Errorf("not counted yet")
		}
		return nil
	})
	if code, _, body := planetest.Get(t, cluster.AdminConfig(old), "/apis"); code != http.StatusOK {
		t.Fatalf("GET /apis through the v1.36.3 server: %d %s", code, body)
	}

	for name, component := range recorded {
		switch component {
		case "kube-apiserver":
			// The server that proxies has every one; the gauges are on all.
			if scrapeComponent(t, component, old)[name] == nil {
				t.Errorf("%s is not on the v1.36.3 kube-apiserver's /metrics", name)
			}
			for i := range cluster.Servers() {
				if everyServerMetrics[name] && scrapeComponent(t, component, i)[name] == nil {
					t.Errorf("%s is not on kube-apiserver %d's /metrics", name, i)
				}
			}
		case "peerdiscovery-apiserver":
			for i := range cluster.Extensions() {
				if scrapeComponent(t, component, i)[name] == nil {
					t.Errorf("%s is not on peerdiscovery-apiserver replica %d's /metrics", name, i)
				}
			}
		case "prometheus":
			// Made by Prometheus for each target (up), on no /metrics:
			// test/alerts finds it in a real Prometheus.
		}
	}

	// A healthy plane fires none of the gauge alerts.
	planetest.WaitFor(t, 2*time.Minute, "the alerts' gauges to read healthy", func() error {
		for i := range cluster.Servers() {
			m := scrapeComponent(t, "kube-apiserver", i)
			for _, want := range []struct {
				name, labels string
				value        float64
			}{
				{"peerdiscovery_filter_enabled", "", 1},
				{"peerdiscovery_filter_cache_synced", "", 1},
				{"aggregator_unavailable_apiservice", `name="v1alpha1.peerdiscovery.k8s.io"`, 0},
			} {
				if v, ok := m[want.name][want.labels]; !ok || v != want.value {
					return fmt.Errorf("kube-apiserver %d: %s{%s} = %v (present %v), want %v", i, want.name, want.labels, v, ok, want.value)
				}
			}
		}
		for i := range cluster.Extensions() {
			m := scrapeComponent(t, "peerdiscovery-apiserver", i)
			if v := m["peerdiscovery_peers"][`state="not_ready"`]; v != 0 {
				return fmt.Errorf("replica %d: %v peers not ready", i, v)
			}
			if v := m["peerdiscovery_routes"][`kind="unavailable"`]; v != 0 {
				return fmt.Errorf("replica %d: %v routes unavailable", i, v)
			}
			updated, ok := m["peerdiscovery_view_last_update_timestamp_seconds"][""]
			if age := time.Since(time.Unix(int64(updated), 0)); !ok || age > 3*time.Minute || age < -time.Minute {
				return fmt.Errorf("replica %d: view last updated %v ago (gauge %v)", i, age.Round(time.Second), updated)
			}
		}
		return nil
	})
}

// scrapeComponent reads the /metrics of kube-apiserver i or of
// peerdiscovery-apiserver replica i.
func scrapeComponent(t *testing.T, component string, i int) map[string]map[string]float64 {
	t.Helper()
	if component == "peerdiscovery-apiserver" {
		return scrape(t, cluster.ExtensionConfig(i))
	}
	return scrape(t, cluster.AdminConfig(i))
}
