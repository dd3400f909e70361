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

package planetest

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// MonitoringMetrics reads artifacts/monitoring/metrics.txt (path): every
// metric the alerts and the dashboard use, mapped to the component that
// serves it, kube-apiserver or peerdiscovery-apiserver, or prometheus for
// a series Prometheus makes itself for each target (up). (hack/monitoring
// checks, with Prometheus' PromQL parser, that it names exactly those.)
func MonitoringMetrics(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recorded := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || (fields[1] != "kube-apiserver" && fields[1] != "peerdiscovery-apiserver" && fields[1] != "prometheus") {
			t.Fatalf("%s: %q is not `name kube-apiserver|peerdiscovery-apiserver|prometheus`", path, line)
		}
		recorded[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(recorded) == 0 {
		t.Fatalf("%s records no metric", path)
	}
	return recorded
}
