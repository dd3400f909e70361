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

package upgradedrill

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Convergence from an audit log: the User-Agent names the server the
// client chose; another server's name in this server's log is a proxied
// request.
func TestConvergenceFromAudit(t *testing.T) {
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	line := func(at time.Duration, via int) string {
		return fmt.Sprintf(`{"stage":"ResponseComplete","requestReceivedTimestamp":%q,"userAgent":"%s%d"}`+"\n", started.Add(at).Format(time.RFC3339Nano), userAgentPrefix, via)
	}
	log := line(5*time.Second, 1) + line(9*time.Second, 0) + // before SIGTERM: one proxied, one direct
		line(11*time.Second, 2) + // after SIGTERM, before exit
		`{"stage":"RequestReceived","userAgent":"x"}` + "\n" +
		line(31*time.Second, 1) + line(32*time.Second, 2) + line(33*time.Second, 1) // after ready
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	step := StepResult{Step: Step{Server: 0}, SIGTERM: 10 * time.Second, Exited: 15 * time.Second, Ready: 30 * time.Second}
	c, err := convergence(path, started, step, 40*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxiedBefore != 1 || c.Leave == nil || *c.Leave != time.Second || c.Join[1] != time.Second || c.Join[2] != 2*time.Second || joinWrong(c) {
		t.Fatalf("%+v leave %v", c, c.Leave)
	}
}

// joinWrong: the fixture's joins are 1 s and 2 s.
func joinWrong(c Convergence) bool {
	p50, slowest := c.JoinP50Max()
	return p50 != time.Second || slowest != 2*time.Second
}
