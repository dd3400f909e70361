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
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// These run without a control plane (and so in the test command): what
// test/alerts changes in the shipped files, and only that.

func TestE2ERulesShortenOnlyFor(t *testing.T) {
	shipped := shippedRules(t)
	got := e2eRules(t, shipped)
	n := 0
	for gi, g := range shipped.Groups {
		for ri, r := range g.Rules {
			n++
			e := got.Groups[gi].Rules[ri]
			want, _ := time.ParseDuration(r.For)
			have, err := time.ParseDuration(e.For)
			if err != nil || have != want/forDivisor {
				t.Errorf("%s: for %s here, %s shipped: want a %dth", r.Alert, e.For, r.For, forDivisor)
			}
			e.For = r.For
			if burnAlerts[r.Alert] {
				// Each rate window a tenth: 1h 360s, 5m 30s, 6h 2160s, 30m 180s.
				shipped, here := rangeWindow.FindAllString(r.Expr, -1), rangeWindow.FindAllString(e.Expr, -1)
				if len(shipped) == 0 || len(shipped) != len(here) {
					t.Errorf("%s: windows %v shipped, %v here", r.Alert, shipped, here)
				}
				for i := range min(len(shipped), len(here)) {
					s, _ := time.ParseDuration(strings.Trim(shipped[i], "[]"))
					h, _ := time.ParseDuration(strings.Trim(here[i], "[]"))
					if h*forDivisor != s {
						t.Errorf("%s: window %s here for %s shipped: want a %dth", r.Alert, here[i], shipped[i], forDivisor)
					}
				}
				if rangeWindow.ReplaceAllString(e.Expr, "[w]") != rangeWindow.ReplaceAllString(r.Expr, "[w]") {
					t.Errorf("%s: more than the windows differ:\n%s\n%s", r.Alert, e.Expr, r.Expr)
				}
				e.Expr = r.Expr
			}
			if !reflect.DeepEqual(e, r) {
				t.Errorf("%s: more than `for` differs:\n%+v\n%+v", r.Alert, e, r)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
	for name := range burnAlerts {
		found := false
		for _, g := range shipped.Groups {
			for _, r := range g.Rules {
				found = found || r.Alert == name
			}
		}
		if !found {
			t.Errorf("burn alert %s is not in alerts.yaml", name)
		}
	}
}

func TestScrapeConfigChangesOnlyPaths(t *testing.T) {
	got := scrapeConfig(t, map[string]string{
		podTokenFile: "/run/x/token",
		podCAFile:    "/run/x/ca.crt",
		podExtCAFile: "/run/x/ext-ca.crt",
	}, "/run/x/kubeconfig")
	var cfg struct {
		ScrapeConfigs []struct {
			JobName string `json:"job_name"`
			Scheme  string `json:"scheme"`
			SD      []struct {
				Role       string `json:"role"`
				Kubeconfig string `json:"kubeconfig_file"`
			} `json:"kubernetes_sd_configs"`
			Authorization struct {
				CredentialsFile string `json:"credentials_file"`
			} `json:"authorization"`
			TLS struct {
				CAFile     string `json:"ca_file"`
				ServerName string `json:"server_name"`
			} `json:"tls_config"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(got, &cfg); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]string{}
	for _, j := range cfg.ScrapeConfigs {
		jobs[j.JobName] = j.TLS.ServerName
		if j.Scheme != "https" || j.Authorization.CredentialsFile != "/run/x/token" || len(j.SD) != 1 ||
			j.SD[0].Role != "endpointslice" || j.SD[0].Kubeconfig != "/run/x/kubeconfig" {
			t.Errorf("job %s: %+v", j.JobName, j)
		}
	}
	want := map[string]string{"kube-apiserver": "kubernetes", "peerdiscovery-apiserver": "peerdiscovery-apiserver.peerdiscovery.svc"}
	if !reflect.DeepEqual(jobs, want) {
		t.Errorf("jobs and their TLS server names: %v, want %v", jobs, want)
	}
	for _, j := range cfg.ScrapeConfigs {
		wantCA := "/run/x/ca.crt"
		if j.JobName == "peerdiscovery-apiserver" {
			wantCA = "/run/x/ext-ca.crt"
		}
		if j.TLS.CAFile != wantCA {
			t.Errorf("job %s: ca_file %s, want %s", j.JobName, j.TLS.CAFile, wantCA)
		}
	}
	if strings.Contains(string(got), "/var/run/secrets") || strings.Contains(string(got), "/etc/prometheus") {
		t.Errorf("an in-Pod path is left:\n%s", got)
	}
}
