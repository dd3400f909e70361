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

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The write check's verdicts, on hand-made records and lists.
func TestCheckWrites(t *testing.T) {
	stored := func(op int64, names ...string) []unstructured.Unstructured {
		var out []unstructured.Unstructured
		for _, n := range names {
			u := unstructured.Unstructured{}
			u.SetName(n)
			u.SetLabels(map[string]string{opLabel: fmt.Sprint(op)})
			out = append(out, u)
		}
		return out
	}
	creates := []*createRecord{
		{Kind: "configmaps", Op: 1, Acked: true, Name: "a"},                        // stored once
		{Kind: "configmaps", Op: 2, Acked: true, Name: "b"},                        // lost
		{Kind: "configmaps", Op: 3, Acked: true, Name: "c", DeleteAcked: true},     // still present
		{Kind: "configmaps", Op: 4},                                                // unacked, stored twice
		{Kind: "configmaps", Op: 5},                                                // unacked, absent
		{Kind: "configmaps", Op: 6, Acked: true, Name: "f", DeleteUncertain: true}, // either
	}
	lists := map[string][]unstructured.Unstructured{"configmaps": append(append(append(stored(1, "a"), stored(3, "c")...), stored(4, "d1", "d2")...), stored(6, "f")...)}
	wc := checkWrites(creates, lists)
	if wc.OK() || wc.FoundOnce != 1 || fmt.Sprint(wc.Lost) != "[configmaps/2 b]" || fmt.Sprint(wc.StillPresent) != "[configmaps/3 c]" ||
		fmt.Sprint(wc.Duplicated) != "[configmaps/4 ×2]" || wc.UnackedStored != 1 || wc.UnackedAbsent != 1 || wc.DeletesUncertain != 1 {
		t.Fatalf("%+v", wc)
	}
	if ok := checkWrites(creates[:1], map[string][]unstructured.Unstructured{"configmaps": stored(1, "a")}); !ok.OK() {
		t.Fatalf("%+v", ok)
	}
}

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

func TestSummarize(t *testing.T) {
	r := &Result{Phases: []Phase{{Name: "a"}, {Name: "b"}},
		Samples: []Sample{
			{Phase: 0, Code: 200, Took: time.Millisecond, Verb: "get"},
			{Phase: 1, Code: 404, Took: 3 * time.Millisecond, Verb: "list"},
			{Phase: 1, Code: 409, Took: 2 * time.Millisecond, Verb: "update"},
			{Phase: 1, Code: 200, Took: time.Hour, Verb: "watch"},
		},
		Attempts: []Attempt{{Phase: 1, Code: 503, RetryAfter: true}, {Phase: 1, Code: 503}, {Phase: 1, Code: 429}, {Phase: 0, Code: 502}, {Phase: 0}},
	}
	per, total := Summarize(r)
	if total.Ops != 4 || total.OK != 2 || total.FalseNotFound != 1 || total.Conflict != 1 || total.Failed != 2 ||
		total.UnavailableRetry != 1 || total.UnavailableNoHint != 1 || total.TooMany != 1 || total.Other5xx != 1 || total.NoResponse != 1 {
		t.Fatalf("total %+v", total)
	}
	if per[1].P99 != 3*time.Millisecond || per[0].P50 != time.Millisecond {
		t.Fatalf("latency (watches excluded): %+v", per)
	}
}
