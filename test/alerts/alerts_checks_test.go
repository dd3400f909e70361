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
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// logInputAge logs how old each filter's routing informers' input is now,
// and the oldest it was over the run (faults included), per server and
// informer: the figures an alert on a stalled input would be set from.
func logInputAge(t *testing.T, p *prometheus) {
	t.Helper()
	for _, q := range []string{
		`time() - peerdiscovery_filter_informer_last_input_timestamp_seconds`,
		`max_over_time((time() - peerdiscovery_filter_informer_last_input_timestamp_seconds)[60m:5s])`,
	} {
		v, err := p.queryVector(q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		var lines []string
		for _, s := range v {
			lines = append(lines, fmt.Sprintf("%s %s: %v s", s.Metric["instance"], s.Metric["resource"], s.Value[1]))
		}
		sort.Strings(lines)
		t.Logf("%s:\n  %s", q, strings.Join(lines, "\n  "))
	}
}

// waitTargets waits until Prometheus scrapes every kube-apiserver and
// every replica over verified HTTPS, with the shipped jobs.
func waitTargets(t *testing.T, p *prometheus) {
	t.Helper()
	want := map[string]string{}
	for _, s := range cluster.Servers() {
		want[net.JoinHostPort(s.IP, "6443")] = "kube-apiserver"
	}
	for _, e := range cluster.Extensions() {
		want[net.JoinHostPort(e.IP, "6443")] = "peerdiscovery-apiserver"
	}
	planetest.WaitFor(t, 2*time.Minute, "every component scraped", func() error {
		targets, err := p.targets()
		if err != nil {
			return err
		}
		up := map[string]string{}
		var problems []string
		for _, tg := range targets {
			if tg.Health == "up" && strings.HasPrefix(tg.ScrapeURL, "https://") {
				up[tg.Labels["instance"]] = tg.Labels["job"]
			} else {
				problems = append(problems, fmt.Sprintf("%s %s: %s %s", tg.Labels["job"], tg.ScrapeURL, tg.Health, tg.LastError))
			}
		}
		for instance, job := range want {
			if up[instance] != job {
				return fmt.Errorf("%s (%s) not scraped; targets: %v, problems: %v", instance, job, up, problems)
			}
		}
		return nil
	})
}

// waitRulesHealthy waits until every shipped alert is loaded and has been
// evaluated without error.
func waitRulesHealthy(t *testing.T, p *prometheus, alerts map[string]time.Duration) {
	t.Helper()
	planetest.WaitFor(t, time.Minute, "every alert loaded and evaluated", func() error {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Type      string `json:"type"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.get("/api/v1/rules", nil, &data); err != nil {
			return err
		}
		ok := map[string]bool{}
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				if r.Type == "alerting" && r.Health == "ok" {
					ok[r.Name] = true
				} else if r.LastError != "" {
					return fmt.Errorf("%s: %s", r.Name, r.LastError)
				}
			}
		}
		for name := range alerts {
			if !ok[name] {
				return fmt.Errorf("%s not loaded or not evaluated yet", name)
			}
		}
		return nil
	})
}

// waitQuery waits until an instant query gives at least one series.
func waitQuery(t *testing.T, p *prometheus, q string, timeout time.Duration) {
	t.Helper()
	planetest.WaitFor(t, timeout, q, func() error {
		n, err := p.query(q)
		if err == nil && n == 0 {
			err = fmt.Errorf("no series")
		}
		return err
	})
}

// checkPrometheusRBAC checks that rbac.yaml gives Prometheus' identity what
// it scrapes with and nothing more.
func checkPrometheusRBAC(t *testing.T) {
	t.Helper()
	cs := planetest.Kube(t, cluster.AdminConfig(old))
	user := "system:serviceaccount:" + promNamespace + ":" + promServiceAccount
	for _, c := range []struct {
		attrs authorizationv1.SubjectAccessReviewSpec
		want  bool
	}{
		{authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}, true},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "peerdiscovery", Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"}}, true},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "list", Resource: "pods"}}, true},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "list", Resource: "pods"}}, false},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "peerdiscovery", Verb: "get", Resource: "secrets"}}, false},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices"}}, false},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: "peerdiscovery.k8s.io", Resource: "apiserverpeers"}}, false},
		{authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "list", Group: "coordination.k8s.io", Resource: "leases"}}, false},
	} {
		c.attrs.User = user
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{Spec: c.attrs}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != c.want {
			what, _ := json.Marshal(c.attrs)
			t.Errorf("%s allowed %v, want %v: %s", user, sar.Status.Allowed, c.want, what)
		}
	}
}

// checkMetricNames checks that every metric of metrics.txt (what the
// alerts and the dashboard use) is in Prometheus, scraped from the plane.
func checkMetricNames(t *testing.T, p *prometheus) {
	t.Helper()
	names, err := p.metricNames()
	if err != nil {
		t.Fatal(err)
	}
	for name := range planetest.MonitoringMetrics(t, monitoringDir+"metrics.txt") {
		if !slices.Contains(names, name) {
			t.Errorf("%s (metrics.txt) is not in Prometheus' /api/v1/label/__name__/values", name)
		}
	}
}

// grafanaInterval are the interval variables of dashboard.json's queries.
var grafanaInterval = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b`)

// checkDashboardQueries runs every query of dashboard.json in Prometheus
// (Grafana's intervals as 5m): each must evaluate without error.
func checkDashboardQueries(t *testing.T, p *prometheus) {
	t.Helper()
	data, err := os.ReadFile(monitoringDir + "dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []panel `json:"panels"` // a collapsed row's
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var panels []panel
	for _, p := range dash.Panels {
		panels = append(panels, p)
		panels = append(panels, p.Panels...)
	}
	queries, empty := 0, 0
	for _, panel := range panels {
		for _, tg := range panel.Targets {
			queries++
			n, err := p.query(grafanaInterval.ReplaceAllString(tg.Expr, "5m"))
			if err != nil {
				t.Errorf("dashboard panel %q: %v", panel.Title, err)
			}
			if n == 0 {
				empty++
				t.Logf("dashboard panel %q: no series now: %s", panel.Title, tg.Expr)
			}
		}
	}
	t.Logf("dashboard: %d queries evaluated in Prometheus, %d with no series at the end of the run", queries, empty)
}
