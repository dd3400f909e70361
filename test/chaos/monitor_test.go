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

package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/test/workload"
)

const s = time.Second

// A 404 is false while a server that serves the kind runs or is inside
// its tombstone, at the operation's start and end.
func TestMonitorFalse404(t *testing.T) {
	m := NewMonitor(3, map[string][]int{"svm": {2}, "configmaps": {0, 1, 2}}, 60*s)
	m.Exited(2, 10*s) // crash at 10 s
	m.Ready(2, 100*s) // back at 100 s
	m.Exited(2, 200*s)
	for _, c := range []struct {
		at, took time.Duration
		kind     string
		code     int
		false404 bool
	}{
		{5 * s, s, "svm", 404, true},       // live
		{5 * s, s, "svm", 503, false},      // not a 404
		{20 * s, s, "svm", 404, true},      // inside the tombstone
		{69 * s, 2 * s, "svm", 404, false}, // ends after the tombstone
		{80 * s, s, "svm", 404, false},     // no server, no tombstone
		{150 * s, s, "svm", 404, true},     // live again
		{300 * s, s, "svm", 404, false},    // tombstone over
		{300 * s, s, "configmaps", 404, true},
		{300 * s, s, "unknown", 404, false},
	} {
		before := len(m.Violations())
		m.Sample(workload.Sample{At: c.at, Took: c.took, Kind: c.kind, Code: c.code, Verb: "get"})
		if got := len(m.Violations()) - before; got != map[bool]int{true: 1, false: 0}[c.false404] {
			t.Errorf("%+v: %d violations", c, got)
		}
	}
}

// A wait over MaxWait counts unless the server it was sent to was
// frozen, CPU-capped or not running during it.
func TestMonitorWaits(t *testing.T) {
	m := NewMonitor(2, nil, 60*s)
	m.Unresponsive(1, 10*s)
	m.Responsive(1, 20*s)
	m.Exited(0, 100*s)
	m.Ready(0, 110*s)
	for _, c := range []struct {
		at, took time.Duration
		server   int
		violates bool
	}{
		{0, 10 * s, 0, false},       // at the bound
		{0, 11 * s, 0, true},        // over it
		{0, 11 * s, 1, false},       // overlaps the freeze from 10 s
		{5 * s, 11 * s, 1, false},   // overlaps the freeze
		{25 * s, 11 * s, 1, true},   // after it
		{95 * s, 20 * s, 0, false},  // its server restarted meanwhile
		{120 * s, 30 * s, 0, true},  // up all along
		{200 * s, 30 * s, 1, true},  // up all along
		{15 * s, 2 * s, 1, false},   // short
		{105 * s, 12 * s, 0, false}, // sent while it was down
	} {
		before := len(m.Violations())
		m.Attempt(workload.Attempt{At: c.at, Took: c.took, Server: c.server, Method: "GET", Path: "/x", Code: 200})
		if got := len(m.Violations()) - before; got != map[bool]int{true: 1, false: 0}[c.violates] {
			t.Errorf("%+v: %d violations", c, got)
		}
	}
}

// A 502, 503 or 504 is unnecessary when a server serving the kind had
// been ready, responsive and reachable from the receiving server for the
// detection grace before the attempt and throughout it.
func TestMonitorUnnecessary5xx(t *testing.T) {
	// svm: server 2 only; configmaps: every server.
	m := NewMonitor(3, map[string][]int{"svm": {2}, "configmaps": {0, 1, 2}}, 60*s)
	m.Stopping(2, 100*s) // SIGTERM at 100 s
	m.Exited(2, 105*s)
	m.Ready(2, 150*s)
	m.Unresponsive(2, 200*s) // frozen 200-220 s
	m.Responsive(2, 220*s)
	m.Partitioned(2, 0, 300*s) // 0 and 2 cut off 300-320 s
	m.Healed(0, 2, 320*s)
	m.Unresponsive(1, 400*s) // server 1 capped 400-500 s
	m.Responsive(1, 500*s)
	for _, c := range []struct {
		at, took time.Duration
		server   int
		kind     string
		code     int
		violates bool
	}{
		{10 * s, s, 0, "svm", 503, true},          // server 2 ready all along
		{2 * s, s, 0, "svm", 503, true},           // ready since before the start
		{10 * s, s, 0, "svm", 502, true},          // 502 too
		{10 * s, s, 0, "svm", 504, true},          // and 504
		{10 * s, s, 0, "svm", 500, false},         // not an unavailable answer
		{10 * s, s, 0, "svm", 429, false},         // nor a 429
		{10 * s, s, 0, "other", 503, false},       // not a workload kind
		{99 * s, 2 * s, 0, "svm", 503, false},     // SIGTERM during the attempt
		{120 * s, s, 0, "svm", 503, false},        // stopped
		{152 * s, s, 0, "svm", 503, false},        // back, within the grace
		{156 * s, s, 0, "svm", 503, true},         // back for longer than the grace
		{210 * s, s, 0, "svm", 503, false},        // frozen
		{223 * s, s, 0, "svm", 503, false},        // thawed within the grace
		{226 * s, s, 0, "svm", 503, true},         // thawed for longer
		{310 * s, s, 0, "svm", 503, false},        // 0 cannot reach 2
		{310 * s, s, 1, "svm", 503, true},         // 1 can
		{324 * s, s, 0, "svm", 503, false},        // healed within the grace
		{310 * s, s, 0, "configmaps", 503, true},  // 0 serves it itself
		{450 * s, s, 1, "configmaps", 503, false}, // the receiving server was capped
		{450 * s, s, 0, "configmaps", 503, true},
	} {
		before := len(m.Violations())
		m.Attempt(workload.Attempt{At: c.at, Took: c.took, Server: c.server, Kind: c.kind, Method: "GET", Path: "/x", Code: c.code})
		if got := len(m.Violations()) - before; got != map[bool]int{true: 1, false: 0}[c.violates] {
			t.Errorf("%+v: %d violations", c, got)
		}
	}
	if v := m.Violations(); len(v) > 0 && (v[0].Invariant != InvUnnecessary5xx || !strings.Contains(v[0].Detail, "kube-apiserver-2 serving svm")) {
		t.Errorf("first violation %+v", v[0])
	}
}

// Violations less than incidentGap apart make one incident, printed with
// the timeline before it.
func TestIncidents(t *testing.T) {
	vs := []Violation{
		{Invariant: InvFalse404, Kind: "svm", At: 10 * s, Server: 0, Detail: "first"},
		{Invariant: InvFalse404, Kind: "svm", At: 15 * s, Server: 1},
		{Invariant: InvFalse404, Kind: "pdb", At: 16 * s, Server: 1},
		{Invariant: InvFalse404, Kind: "svm", At: 40 * s, Server: 0},
		{Invariant: InvWrites, At: 50 * s, Server: -1},
	}
	in := Incidents(vs)
	if len(in) != 4 || in[0].Count != 2 || in[0].To != 15*s || len(in[0].Servers) != 2 || in[3].Servers != nil {
		t.Fatalf("%+v", in)
	}
	text := Describe("peerdiscovery", 913, in[0], []Event{{At: 2 * s, Text: "SIGKILL kube-apiserver-2"}, {At: 12 * s, Text: "kube-apiserver-2 ready"}, {At: 200 * s, Text: "later"}})
	for _, want := range []string{"seed 913", "false 404 [svm]: 2 from 10.0s to 15.0s; first: first", "2.0s  SIGKILL kube-apiserver-2\n      10.0s  >>> first violation\n      12.0s  kube-apiserver-2 ready"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "later") {
		t.Errorf("event after the incident in\n%s", text)
	}
}

// The summary counts each invariant per seed and routing, and in all.
func TestSummary(t *testing.T) {
	r := func(seed uint64, routing string, invs ...string) *Result {
		res := &Result{Seed: seed, Routing: routing}
		for _, inv := range invs {
			res.Violations = append(res.Violations, Violation{Invariant: inv})
		}
		return res
	}
	got := Summary([][]*Result{
		{r(1, "peerdiscovery"), r(1, "upstream", InvFalse404, InvFalse404, InvNamespaces)},
		{r(2, "peerdiscovery", InvSlowRequest), r(2, "upstream", InvFalse404)},
	})
	for _, want := range []string{
		"| 1 | 0 | upstream | 2 | 0 | 0 | 0 | 1 | 0 | 0 | 0 | 0 | 0 | **3** |",
		"| 2 | 0 | peerdiscovery | 0 | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | **1** |",
		"| all | | **peerdiscovery** | **0** | **1** | **0** | **0** | **0** | **0** | **0** | **0** | **0** | **0** | **1** |",
		"| all | | **upstream** | **3** | **0** | **0** | **0** | **1** | **0** | **0** | **0** | **0** | **0** | **4** |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// The barrier releases everyone when the last arrives, and for good when
// aborted.
func TestBarrier(t *testing.T) {
	b := NewBarrier(2)
	done := make(chan error, 1)
	go func() { done <- b.Wait(context.Background()) }()
	select {
	case <-done:
		t.Fatal("released with one of two")
	case <-time.After(50 * time.Millisecond):
	}
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { done <- b.Wait(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	b.Abort()
	if err := <-done; err != nil {
		t.Fatalf("a waiter released by Abort: %v", err)
	}
	if err := b.Wait(context.Background()); err == nil {
		t.Fatal("waited on an aborted barrier")
	}
}
