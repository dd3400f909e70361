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
	"bufio"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

const monitoringDir = "../../artifacts/monitoring/"

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
)

// metricNames extracts the metric names of a PromQL expression: what is
// left once strings, label matchers, ranges, groupings, function calls and
// keywords are removed.
func metricNames(expr string) []string {
	expr = promStrings.ReplaceAllString(expr, "")
	expr = promMatchers.ReplaceAllString(expr, "")
	expr = promGrouping.ReplaceAllString(expr, "")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(expr, -1) {
		name := m[0]
		if m[1] != "" || promKeywords[name] {
			continue // a function, or an operator
		}
		out = append(out, name)
	}
	return out
}

// readMonitoring reads the alert rules and the recording of their metric
// names, and checks they agree: every metric in a rule is recorded, every
// recorded metric is used.
func readMonitoring(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(monitoringDir + "alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	used := map[string]bool{}
	alerts := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts++
			if _, err := time.ParseDuration(r.For); r.Alert == "" || r.Expr == "" || err != nil || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: needs alert, expr, for (a duration), labels.severity and annotations.summary", r.Alert)
			}
			names := metricNames(r.Expr)
			if len(names) == 0 {
				t.Errorf("rule %q names no metric: %s", r.Alert, r.Expr)
			}
			for _, n := range names {
				used[n] = true
			}
		}
	}
	if alerts < 4 {
		t.Fatalf("%d alerts", alerts)
	}
	recorded := map[string]string{}
	f, err := os.Open(monitoringDir + "metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || (fields[1] != "kube-apiserver" && fields[1] != "peerdiscovery-apiserver") {
			t.Fatalf("metrics.txt: %q is not `name kube-apiserver|peerdiscovery-apiserver`", line)
		}
		recorded[fields[0]] = fields[1]
	}
	for n := range used {
		if recorded[n] == "" {
			t.Errorf("alerts.yaml uses %s, which metrics.txt does not record", n)
		}
	}
	for n := range recorded {
		if !used[n] {
			t.Errorf("metrics.txt records %s, which no rule uses", n)
		}
	}
	return recorded
}

func TestMonitoringRules(t *testing.T) {
	if got := fmt.Sprint(metricNames(`sum by (instance) (rate(a_total{type=~"x|y"}[5m])) / clamp_min(b, 1) > 0 and on (instance) (c == 0)`)); got != "[a_total b c]" {
		t.Fatalf("metricNames: %s", got)
	}
	readMonitoring(t)
}

// TestMonitoringMetrics scrapes every metric the alerts use from the real
// control plane's /metrics: each kube-apiserver for the filter's and the
// aggregator's, each peerdiscovery-apiserver replica for the engine's. On
// this healthy plane, the gauges the alerts read must say so.
func TestMonitoringMetrics(t *testing.T) {
	readyPlane(t)
	recorded := readMonitoring(t)

	// Counters appear with their first increment: a proxied LIST, and one
	// whose deadline passes while proxying (type canceled). The filter
	// answers 503 until its routing caches synced, which may be after the
	// servers are ready.
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

	for name, component := range recorded {
		switch component {
		case "kube-apiserver":
			// The server that proxies has every one; the gauges are on all.
			if scrapeComponent(t, component, old)[name] == nil {
				t.Errorf("%s is not on the v1.36.3 kube-apiserver's /metrics", name)
			}
			for i := range cluster.Servers() {
				if strings.HasPrefix(name, "peerdiscovery_filter_") || strings.HasPrefix(name, "aggregator_") {
					if scrapeComponent(t, component, i)[name] == nil {
						t.Errorf("%s is not on kube-apiserver %d's /metrics", name, i)
					}
				}
			}
		case "peerdiscovery-apiserver":
			for i := range cluster.Extensions() {
				if scrapeComponent(t, component, i)[name] == nil {
					t.Errorf("%s is not on peerdiscovery-apiserver replica %d's /metrics", name, i)
				}
			}
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
