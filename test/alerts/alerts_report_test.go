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
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// report logs the table of the alerts and writes it to the run folder.
func report(t *testing.T, rows []row, all map[string][]episode, shippedFor, e2eFor map[string]time.Duration) {
	t.Helper()
	sec := func(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }
	var b strings.Builder
	fmt.Fprintf(&b, "| alert | fault | `for` here (shipped) | expression true after | fired after | would fire with the shipped `for` after | repair | resolved after |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		forHere := fmt.Sprintf("%s (%s)", e2eFor[r.alert], shippedFor[r.alert])
		if burnAlerts[r.alert] {
			forHere += ", windows ÷10"
		}
		if r.ep == nil {
			fmt.Fprintf(&b, "| %s | %s | %s | - | quiet: %s | - | %s | - |\n", r.alert, r.fault, forHere, r.quiet, r.fix)
			continue
		}
		pending := r.ep.pending.Sub(r.faultAt)
		shipped := sec(pending + shippedFor[r.alert])
		if burnAlerts[r.alert] {
			// Its windows are a tenth of the shipped ones too.
			shipped = "≈ " + sec(forDivisor*pending+shippedFor[r.alert])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.alert, r.fault, forHere, sec(pending), sec(r.ep.firing.Sub(r.faultAt)),
			shipped, r.fix, sec(r.ep.resolved.Sub(r.fixAt)))
	}
	b.WriteString("\nEvery episode (pending → firing → resolved, wall clock):\n")
	var names []string
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, ep := range all[name] {
			fmt.Fprintf(&b, "  %s: pending %s, firing %s, inactive %s, %v, value %s\n", name, clock(ep.pending), clock(ep.firing), clock(ep.closed), ep.instances, ep.value)
		}
	}
	t.Logf("alerts:\n%s", b.String())
	path := filepath.Join(cluster.RunDir(), "prometheus", "report.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05")
}
