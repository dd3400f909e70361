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

package monitoring

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const dir = "../../artifacts/monitoring"

var (
	promql = parser.NewParser(parser.Options{})
	// The components metrics.txt may name.
	components = []string{"kube-apiserver", "peerdiscovery-apiserver", "prometheus"}
)

// metricNames returns the metric names expr selects, sorted and unique; a
// selector without a literal name (`{__name__=~"..."}`) is an error: the
// name could not be checked against the control plane.
func metricNames(expr parser.Expr) ([]string, error) {
	var names []string
	var err error
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			err = fmt.Errorf("selector %s names no metric", vs)
			return nil
		}
		names = append(names, name)
		return nil
	})
	sort.Strings(names)
	return slices.Compact(names), err
}

// alertRules parses alerts.yaml as Prometheus does (rulefmt: the rule
// file's schema, every expression, every annotation template).
func alertRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join(dir, "alerts.yaml"), false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	var rules []rulefmt.Rule
	for _, g := range groups.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// grafanaInterval are the interval variables Grafana fills in; a query
// parses once they are replaced by a duration.
var grafanaInterval = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)

type dashboardTarget struct {
	Panel, RefID, Expr string
}

// dashboardTargets reads dashboard.json and returns every query of every
// panel (rows' nested panels included), checking the panel structure
// Grafana's import needs.
func dashboardTargets(t *testing.T) []dashboardTarget {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	type panel struct {
		ID         int         `json:"id"`
		Type       string      `json:"type"`
		Title      string      `json:"title"`
		Datasource *datasource `json:"datasource"`
		Targets    []struct {
			Datasource *datasource `json:"datasource"`
			Expr       string      `json:"expr"`
			RefID      string      `json:"refId"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		UID        string            `json:"uid"`
		Title      string            `json:"title"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("dashboard.json: uid %q, title %q: both are needed for an import that can be repeated", dash.UID, dash.Title)
	}
	var variables []string
	for _, v := range dash.Templating.List {
		variables = append(variables, v.Name)
		if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
			t.Errorf("dashboard.json: variable datasource is %s %s, want a prometheus datasource variable", v.Type, v.Query)
		}
	}
	if !slices.Equal(variables, []string{"datasource"}) {
		t.Errorf("dashboard.json: variables %v, want [datasource] (the query checks know no others)", variables)
	}
	var out []dashboardTarget
	ids := map[int]bool{}
	var walk func(raw []json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("dashboard.json: %v", err)
			}
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("dashboard.json: panel %q: id %d is zero or not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("dashboard.json: panel %d (%s): needs a title and a query", p.ID, p.Type)
			}
			refs := map[string]bool{}
			for _, ds := range append([]*datasource{p.Datasource}, func() (d []*datasource) {
				for _, tg := range p.Targets {
					d = append(d, tg.Datasource)
				}
				return d
			}()...) {
				if ds == nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
					t.Errorf("dashboard.json: panel %q: datasource %+v, want the prometheus ${datasource} variable", p.Title, ds)
				}
			}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("dashboard.json: panel %q: refId %q empty or repeated", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				out = append(out, dashboardTarget{Panel: p.Title, RefID: tg.RefID, Expr: tg.Expr})
			}
		}
	}
	walk(dash.Panels)
	return out
}

// parseQuery parses a dashboard query with Grafana's interval variables
// replaced by 5m; any other variable is an error.
func parseQuery(q string) (parser.Expr, error) {
	q = grafanaInterval.ReplaceAllString(q, "5m")
	if strings.Contains(q, "$") {
		return nil, fmt.Errorf("a Grafana variable other than the intervals: %s", q)
	}
	return promql.ParseExpr(q)
}

// recordedMetrics reads metrics.txt: metric name, then the component
// whose /metrics test/e2e finds it on.
func recordedMetrics(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || !slices.Contains(components, fields[1]) {
			t.Errorf("metrics.txt: %q is not `name %s`", line, strings.Join(components, "|"))
			continue
		}
		if _, dup := out[fields[0]]; dup {
			t.Errorf("metrics.txt: %s recorded twice", fields[0])
		}
		out[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAlertRules(t *testing.T) {
	rules := alertRules(t)
	if len(rules) == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" || seen[r.Alert] {
			t.Errorf("rule %q (%s): an alert with a unique name (no recording rules here)", r.Alert, r.Expr)
		}
		seen[r.Alert] = true
		if r.For <= 0 {
			t.Errorf("%s: no `for`: one bad scrape would page", r.Alert)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: needs annotations summary and description", r.Alert)
		}
	}
}

func TestDashboardQueriesParse(t *testing.T) {
	targets := dashboardTargets(t)
	if len(targets) == 0 {
		t.Fatal("dashboard.json has no queries")
	}
	for _, tg := range targets {
		expr, err := parseQuery(tg.Expr)
		if err != nil {
			t.Errorf("panel %q query %s: %v", tg.Panel, tg.RefID, err)
			continue
		}
		if names, err := metricNames(expr); err != nil || len(names) == 0 {
			t.Errorf("panel %q query %s names no metric (%v): %s", tg.Panel, tg.RefID, err, tg.Expr)
		}
	}
}

// TestMetricsRecorded checks that metrics.txt records exactly the metrics
// the alerts and the dashboard name, so that test/e2e, which finds each
// recorded one on a real control plane, covers them all.
func TestMetricsRecorded(t *testing.T) {
	used := map[string][]string{} // metric -> where
	for _, r := range alertRules(t) {
		expr, err := promql.ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert, err)
		}
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", r.Alert, err)
		}
		for _, n := range names {
			used[n] = append(used[n], "alert "+r.Alert)
		}
	}
	for _, tg := range dashboardTargets(t) {
		expr, err := parseQuery(tg.Expr)
		if err != nil {
			continue // TestDashboardQueriesParse reports it
		}
		names, _ := metricNames(expr)
		for _, n := range names {
			used[n] = append(used[n], fmt.Sprintf("dashboard panel %q", tg.Panel))
		}
	}
	recorded := recordedMetrics(t)
	for n, where := range used {
		if recorded[n] == "" {
			t.Errorf("%s (%s) is not recorded in metrics.txt", n, strings.Join(slices.Compact(where), ", "))
		}
	}
	for n := range recorded {
		if used[n] == nil {
			t.Errorf("metrics.txt records %s, which neither an alert nor the dashboard uses", n)
		}
	}
}

// TestEveryAlertUnitTested checks that alerts_test.yaml (promtool test
// rules) tests each alert both firing and quiet.
func TestEveryAlertUnitTested(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(dir, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTests []struct {
				AlertName string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &tf); err != nil {
		t.Fatalf("alerts_test.yaml: %v", err)
	}
	if !slices.Equal(tf.RuleFiles, []string{"alerts.yaml"}) {
		t.Errorf("alerts_test.yaml: rule_files %v, want [alerts.yaml]", tf.RuleFiles)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTests {
			if len(a.ExpAlerts) > 0 {
				firing[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	for _, r := range alertRules(t) {
		if !firing[r.Alert] || !quiet[r.Alert] {
			t.Errorf("alerts_test.yaml: %s is tested firing %v, quiet %v: want both", r.Alert, firing[r.Alert], quiet[r.Alert])
		}
	}
}

func TestMetricNames(t *testing.T) {
	expr, err := promql.ParseExpr(`sum by (instance) (rate(a_total{type=~"x|y"}[5m])) / clamp_min(b, 1) > 0 and on (instance) ({__name__="c"} == 0) unless d offset 5m`)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := metricNames(expr); err != nil || fmt.Sprint(got) != "[a_total b c d]" {
		t.Errorf("metricNames: %v, %v", got, err)
	}
	expr, err = promql.ParseExpr(`{__name__=~"a.*"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metricNames(expr); err == nil {
		t.Error("metricNames accepted a selector without a metric name")
	}
}
