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
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/peerdiscovery/test/workload"
)

// The invariants, as named in reports.
const (
	// InvFalse404: no 404 for a resource that a live server, or one
	// inside its tombstone, serves.
	InvFalse404 = "false 404"
	// InvSlowRequest: no request to a server that is itself responsive
	// (running, not stopped with SIGSTOP, not CPU-capped) waits more than
	// MaxWait for its response.
	InvSlowRequest = "request waited > 10 s"
	// InvWrites: no write applied twice, no acknowledged write lost (and
	// no acknowledged delete undone), by the final quorum lists.
	InvWrites = "write lost or applied twice"
	// InvInformers: every informer equals a quorum LIST within
	// InformerBound after each episode's faults healed.
	InvInformers = "informer not converged"
	// InvNamespaces: a deleted namespace is gone by the end check, with
	// no object left behind (one still Terminating, or whose objects could
	// not be listed, is no pass).
	InvNamespaces = "deleted namespace not gone or left objects"
	// InvUnnecessary5xx: no 502, 503 or 504 while a server could have
	// answered: one that serves the kind (the receiving server or a
	// peer) had been running, ready, neither frozen nor CPU-capped, and
	// reachable from the receiving server from DetectionGrace before the
	// request until its answer.
	InvUnnecessary5xx = "unnecessary 5xx"
)

// Invariants in report order: those checked as the soak runs, then the
// client figures (CheckClients, after it).
var Invariants = append([]string{InvFalse404, InvSlowRequest, InvWrites, InvInformers, InvNamespaces, InvUnnecessary5xx}, ClientInvariants...)

// DetectionGrace is how long a server that came back (restarted, thawed,
// its CPU cap lifted, a partition healed) may still be missed by the
// other servers' routing. A restarted server is ready only once the view
// lists it ready and two more seconds have passed (its /readyz), so by then
// every filter routes to it already. A server back from a freeze or a CPU
// cap whose Lease lapsed meanwhile is live again at once (a frozen
// renewal loop's overdue timer fires on resume) or within a second (a
// failed renewal is retried after peerlease.RenewRetryInterval; a renewal
// slowed by the cap completes once it is lifted) and read at once; one
// whose Lease did not lapse but whose reads
// failed is read again within engine.NotReadyRecheck (1 s, whatever
// --refresh-interval is); a server that answers is read in milliseconds;
// the view reaches every filter within a second or two (publish, watch,
// the table's 50 ms rebuild). 5 s covers both, with the shipped flags too.
const DetectionGrace = 5 * time.Second

// MaxWait is the longest a request may wait on a responsive server.
const MaxWait = 10 * time.Second

// Violation is one breach of an invariant.
type Violation struct {
	Invariant string        `json:"invariant"`
	At        time.Duration `json:"at"`
	// Server is the kube-apiserver the request was sent to (-1: none).
	Server int    `json:"server"`
	Kind   string `json:"kind,omitempty"`
	Detail string `json:"detail"`
}

// Event is one line of the timeline: a fault, a heal, a server ready or
// gone, a check.
type Event struct {
	At   time.Duration `json:"at"`
	Text string        `json:"text"`
	// Fault, when this event starts (Heal: ends) a fault: its kind.
	Fault FaultKind `json:"fault,omitempty"`
	Heal  bool      `json:"heal,omitempty"`
}

// serverState is one kube-apiserver's history, for the invariants.
type serverState struct {
	// up are the intervals it served: from ready to its exit (end < 0:
	// still running).
	up [][2]time.Duration
	// ready are the intervals it was ready: from ready to the signal
	// that stopped it (a server sent SIGTERM fails its /readyz at once
	// and drains until it exits).
	ready [][2]time.Duration
	// unresponsive are the intervals it was stopped with SIGSTOP or
	// CPU-capped (end < 0: still is).
	unresponsive [][2]time.Duration
}

// Monitor checks the invariants that hold at every moment (false 404s,
// waits) as the workload records operations and attempts, and keeps the
// timeline and every violation.
type Monitor struct {
	tombstone time.Duration
	// served: kind name -> the servers that serve it.
	served map[string][]int

	// notify, when set, hears of each violation that starts an incident
	// (the first of its invariant and kind for incidentGap), as it is
	// found: a long soak shows them while it runs.
	notify func(Violation)

	mu      sync.Mutex
	servers []serverState
	// partitions are the intervals each pair of servers (lower index
	// first) could not reach each other.
	partitions map[[2]int][][2]time.Duration
	events     []Event
	violations []Violation
	lastOf     map[string]time.Duration // invariant/kind -> last violation
}

// NewMonitor: servers kube-apiservers, all serving since 0; served maps
// each kind to the servers that serve it; tombstone is the extension's
// --tombstone-period.
func NewMonitor(servers int, served map[string][]int, tombstone time.Duration) *Monitor {
	m := &Monitor{tombstone: tombstone, served: served, servers: make([]serverState, servers), lastOf: map[string]time.Duration{},
		partitions: map[[2]int][][2]time.Duration{}}
	for i := range m.servers {
		m.servers[i].up = [][2]time.Duration{{0, -1}}
		// Ready well before the workload started.
		m.servers[i].ready = [][2]time.Duration{{-time.Hour, -1}}
	}
	return m
}

// Event records a timeline line.
func (m *Monitor) Event(e Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}

// closeOpen ends the last interval of ivs at t if it is open.
func closeOpen(ivs [][2]time.Duration, t time.Duration) {
	if n := len(ivs); n > 0 && ivs[n-1][1] < 0 {
		ivs[n-1][1] = t
	}
}

// Stopping: server i was sent the signal that stops it at t; it is not
// ready from then on, though it may still drain its requests.
func (m *Monitor) Stopping(i int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	closeOpen(m.servers[i].ready, t)
}

// Exited: server i stopped serving at t (its process is gone).
func (m *Monitor) Exited(i int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	closeOpen(m.servers[i].up, t)
	closeOpen(m.servers[i].ready, t)
}

// Ready: server i serves again, and is ready, from t.
func (m *Monitor) Ready(i int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.servers[i].up = append(m.servers[i].up, [2]time.Duration{t, -1})
	m.servers[i].ready = append(m.servers[i].ready, [2]time.Duration{t, -1})
}

// Unresponsive: server i is stopped or CPU-capped from t (on) until
// Responsive.
func (m *Monitor) Unresponsive(i int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.servers[i].unresponsive = append(m.servers[i].unresponsive, [2]time.Duration{t, -1})
}

// Responsive: server i answers normally again from t.
func (m *Monitor) Responsive(i int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	closeOpen(m.servers[i].unresponsive, t)
}

func pair(i, j int) [2]int { return [2]int{min(i, j), max(i, j)} }

// Partitioned: servers i and j cannot reach each other from t until
// Healed.
func (m *Monitor) Partitioned(i, j int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.partitions[pair(i, j)] = append(m.partitions[pair(i, j)], [2]time.Duration{t, -1})
}

// Healed: servers i and j reach each other again from t.
func (m *Monitor) Healed(i, j int, t time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	closeOpen(m.partitions[pair(i, j)], t)
}

// covered says whether some server that serves kind is live at t or
// inside its tombstone (its exit + the tombstone period).
func (m *Monitor) covered(kind string, t time.Duration) bool {
	for _, i := range m.served[kind] {
		for _, iv := range m.servers[i].up {
			if iv[0] <= t && (iv[1] < 0 || t < iv[1]+m.tombstone) {
				return true
			}
		}
	}
	return false
}

func overlaps(ivs [][2]time.Duration, from, to time.Duration) bool {
	for _, iv := range ivs {
		if iv[0] <= to && (iv[1] < 0 || iv[1] >= from) {
			return true
		}
	}
	return false
}

// Sample checks one operation: a 404 while a server that serves its kind
// was live or tombstoned, at its start and at its end, is false.
func (m *Monitor) Sample(s workload.Sample) {
	if s.Code != 404 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.served[s.Kind]; !known {
		return
	}
	if m.covered(s.Kind, s.At) && m.covered(s.Kind, s.At+s.Took) {
		m.add(Violation{Invariant: InvFalse404, At: s.At, Server: s.Server, Kind: s.Kind,
			Detail: fmt.Sprintf("%s %s via kube-apiserver-%d: 404 %s", s.Verb, s.Kind, s.Server, s.Err)})
	}
}

// Attempt checks one HTTP attempt: it may wait more than MaxWait only on
// a server that was itself unresponsive or not running at some moment of
// it, and it may be answered 502, 503 or 504 only when no server could
// have answered it.
func (m *Monitor) Attempt(a workload.Attempt) {
	if a.Took > MaxWait {
		m.slow(a)
	}
	if a.Code == 502 || a.Code == 503 || a.Code == 504 {
		m.unnecessary5xx(a)
	}
}

func (m *Monitor) slow(a workload.Attempt) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.servers[a.Server]
	end := a.At + a.Took
	if overlaps(st.unresponsive, a.At, end) || !within(st.up, a.At, end) {
		return
	}
	code := fmt.Sprint(a.Code)
	if a.Code == 0 {
		code = "no response"
	}
	m.add(Violation{Invariant: InvSlowRequest, At: a.At, Server: a.Server,
		Detail: fmt.Sprintf("%s %s via kube-apiserver-%d: %s after %.1fs", a.Method, a.Path, a.Server, code, a.Took.Seconds())})
}

// unnecessary5xx records a 5xx answer of a.Server for a kind that some
// server could have answered: one that serves it was ready, responsive
// and reachable from a.Server from DetectionGrace before the attempt to
// its end (a server that went away during the attempt may have had the
// request). A receiving server that was itself frozen or CPU-capped
// during the attempt is excused: its own slowness, not its routing,
// answered.
func (m *Monitor) unnecessary5xx(a workload.Attempt) {
	m.mu.Lock()
	defer m.mu.Unlock()
	servers, known := m.served[a.Kind]
	if !known {
		return
	}
	from, to := a.At-DetectionGrace, a.At+a.Took
	if overlaps(m.servers[a.Server].unresponsive, a.At, to) {
		return
	}
	for _, c := range servers {
		st := m.servers[c]
		if !within(st.ready, from, to) || overlaps(st.unresponsive, from, to) {
			continue
		}
		if c != a.Server && overlaps(m.partitions[pair(a.Server, c)], from, to) {
			continue
		}
		m.add(Violation{Invariant: InvUnnecessary5xx, At: a.At, Server: a.Server, Kind: a.Kind,
			Detail: fmt.Sprintf("%s %s via kube-apiserver-%d: %d after %.1fs, while kube-apiserver-%d serving %s had been ready and reachable since %.1fs",
				a.Method, a.Path, a.Server, a.Code, a.Took.Seconds(), c, a.Kind, from.Seconds())})
		return
	}
}

// within says whether one up interval holds all of [from, to].
func within(ivs [][2]time.Duration, from, to time.Duration) bool {
	for _, iv := range ivs {
		if iv[0] <= from && (iv[1] < 0 || iv[1] >= to) {
			return true
		}
	}
	return false
}

// Violate records a violation found by a later check.
func (m *Monitor) Violate(v Violation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.add(v)
}

// add records v (m.mu held) and tells notify when it starts an incident.
func (m *Monitor) add(v Violation) {
	m.violations = append(m.violations, v)
	key := v.Invariant + "/" + v.Kind
	last, seen := m.lastOf[key]
	m.lastOf[key] = max(last, v.At)
	if m.notify != nil && (!seen || v.At-last > incidentGap) {
		m.notify(v)
	}
}

// Violations and Events return what was recorded, in time order.
func (m *Monitor) Violations() []Violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]Violation(nil), m.violations...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Events is the timeline in time order.
func (m *Monitor) Events() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]Event(nil), m.events...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Incident is violations of one invariant (and kind) less than
// incidentGap apart.
type Incident struct {
	Invariant string        `json:"invariant"`
	Kind      string        `json:"kind,omitempty"`
	From      time.Duration `json:"from"`
	To        time.Duration `json:"to"`
	Count     int           `json:"count"`
	Servers   []int         `json:"servers"`
	First     string        `json:"first"`
}

const incidentGap = 10 * time.Second

// Incidents groups violations (in time order).
func Incidents(vs []Violation) []Incident {
	var out []Incident
	open := map[string]int{} // invariant/kind -> index in out
	for _, v := range vs {
		key := v.Invariant + "/" + v.Kind
		if i, ok := open[key]; ok && v.At-out[i].To <= incidentGap {
			in := &out[i]
			in.To, in.Count = v.At, in.Count+1
			if v.Server >= 0 && !slices.Contains(in.Servers, v.Server) {
				in.Servers = append(in.Servers, v.Server)
			}
			continue
		}
		in := Incident{Invariant: v.Invariant, Kind: v.Kind, From: v.At, To: v.At, Count: 1, First: v.Detail}
		if v.Server >= 0 {
			in.Servers = []int{v.Server}
		}
		open[key] = len(out)
		out = append(out, in)
	}
	return out
}

// timelineWindow is how far back an incident's timeline reaches.
const timelineWindow = 90 * time.Second

// Describe prints an incident with the seed and the timeline before and
// during it.
func Describe(routing string, seed uint64, in Incident, events []Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "VIOLATION (%s, seed %d): %s", routing, seed, in.Invariant)
	if in.Kind != "" {
		fmt.Fprintf(&b, " [%s]", in.Kind)
	}
	fmt.Fprintf(&b, ": %d from %.1fs to %.1fs; first: %s\n  timeline:\n", in.Count, in.From.Seconds(), in.To.Seconds(), in.First)
	marked := false
	for _, e := range events {
		if e.At < in.From-timelineWindow || e.At > in.To+incidentGap {
			continue
		}
		if !marked && e.At > in.From {
			fmt.Fprintf(&b, "  %8.1fs  >>> first violation\n", in.From.Seconds())
			marked = true
		}
		fmt.Fprintf(&b, "  %8.1fs  %s\n", e.At.Seconds(), e.Text)
	}
	if !marked {
		fmt.Fprintf(&b, "  %8.1fs  >>> first violation\n", in.From.Seconds())
	}
	return b.String()
}
