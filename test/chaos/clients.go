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
	"time"

	"sigs.k8s.io/peerdiscovery/test/workload"
)

// The client-visible invariants: what users of the soak's servers feel,
// after client-go's retries, against upstream's on the same seed.
const (
	// InvClientLatency: the p99 time to success is at most upstream's
	// (or MinLatencyBar, if upstream's is lower).
	InvClientLatency = "clients: p99 time to success"
	// InvClientFailed: no more operations failed after retries than
	// upstream's (whose false 404s count as failures).
	InvClientFailed = "clients: failed after retries"
	// InvClientSkipped: at most SkippedFactor × upstream's operations
	// skipped because every worker was busy (waiting).
	InvClientSkipped = "clients: operations skipped"
	// InvClientFloor: every kind completed, through every server, at least
	// FloorShare of its even share of the rate: a run that did nothing, or
	// a path that answered 503 forever, fails.
	InvClientFloor = "clients: completed below the floor"
)

// ClientInvariants are checked once per soak, after it, by CheckClients.
var ClientInvariants = []string{InvClientLatency, InvClientFailed, InvClientSkipped, InvClientFloor}

// The bars of the client invariants.
const (
	MinLatencyBar = time.Second
	SkippedFactor = 1.2
	FloorShare    = 0.2
)

// Clients are one soak's client-visible figures.
type Clients struct {
	// P99ToSuccess is the 99th percentile, over the operations that
	// succeeded, of the time from the first attempt to the final 2xx.
	P99ToSuccess time.Duration `json:"p99ToSuccess"`
	Succeeded    int           `json:"succeeded"`
	// Failed: operations that did not succeed after client-go's retries.
	Failed int `json:"failed"`
	// FailedOrSlow: operations that failed, or succeeded after more than
	// MinLatencyBar. Reported, not checked: unlike P99ToSuccess it counts
	// a client that waited through Retry-After and succeeded no worse than
	// one that failed, and it is not near an edge when about 1 % of the
	// operations are slow (docs/harness.md, the CI bounds).
	FailedOrSlow int `json:"failedOrSlow"`
	Skipped      int `json:"skipped"`
	// Completed counts the operations that succeeded, by kind and by the
	// server they were sent to.
	Completed map[string][]int `json:"completed"`
}

// ClientsOf computes a soak's client figures.
func ClientsOf(r *Result) Clients {
	c := Clients{Skipped: r.Skipped, Completed: map[string][]int{}}
	servers := 0
	for _, ss := range r.Served {
		for _, s := range ss {
			servers = max(servers, s+1)
		}
	}
	var took []time.Duration
	for _, s := range r.Samples {
		if s.Verb == "watch" {
			continue
		}
		if s.Code != 200 {
			c.Failed++
			c.FailedOrSlow++
			continue
		}
		if s.Took > MinLatencyBar {
			c.FailedOrSlow++
		}
		c.Succeeded++
		took = append(took, s.Took)
		if c.Completed[s.Kind] == nil {
			c.Completed[s.Kind] = make([]int, max(servers, s.Server+1))
		}
		c.Completed[s.Kind][s.Server]++
	}
	c.P99ToSuccess = workload.Percentile(took, 0.99)
	return c
}

// ClientBounds are the limits of a soak that runs without upstream's side
// (CI's), measured on the same seed (CIClientBounds says how). A negative
// Failed or Skipped is not checked.
type ClientBounds struct {
	Seed         uint64
	P99ToSuccess time.Duration
	Failed       int
	Skipped      int
}

// CheckClients holds ours to upstream's figures on the same seed
// (upstream nil: to bounds, which must be for ours' seed), and to the
// floor: rate operations per second were offered for the soak's
// workload time over kinds and servers evenly.
func CheckClients(ours, upstream *Result, bounds *ClientBounds, rate int) []Violation {
	c := ClientsOf(ours)
	var out []Violation
	v := func(inv, f string, a ...any) {
		out = append(out, Violation{Invariant: inv, At: ours.End, Server: -1, Detail: fmt.Sprintf(f, a...)})
	}
	var bar *ClientBounds
	var source string
	switch {
	case upstream != nil:
		u := ClientsOf(upstream)
		// Skipped varies most from run to run: 1.2 × upstream's.
		bar, source = &ClientBounds{Seed: upstream.Seed, P99ToSuccess: u.P99ToSuccess, Failed: u.Failed, Skipped: int(SkippedFactor * float64(u.Skipped))}, "upstream on this seed"
	case bounds != nil && bounds.Seed == ours.Seed:
		bar, source = bounds, fmt.Sprintf("the measured bound for seed %d", bounds.Seed)
	}
	// Without a bar (another seed, ours alone) only the floor is checked.
	if bar != nil {
		if limit := max(bar.P99ToSuccess, MinLatencyBar); c.P99ToSuccess > limit {
			v(InvClientLatency, "p99 time to success %s, over %s (%s: %s; never under %s)", ms(c.P99ToSuccess), ms(limit), source, ms(bar.P99ToSuccess), MinLatencyBar)
		}
		if bar.Failed >= 0 && c.Failed > bar.Failed {
			v(InvClientFailed, "%d operations failed after retries, over %d (%s)", c.Failed, bar.Failed, source)
		}
		if bar.Skipped >= 0 && c.Skipped > bar.Skipped {
			v(InvClientSkipped, "%d operations skipped (every worker busy), over %d (%s)", c.Skipped, bar.Skipped, source)
		}
	}
	servers := 0
	for _, ss := range ours.Served {
		for _, s := range ss {
			servers = max(servers, s+1)
		}
	}
	kinds := len(Kinds)
	if servers == 0 || kinds == 0 {
		v(InvClientFloor, "no server served the soak's kinds")
		return out
	}
	floor := int(FloorShare * float64(rate) * ours.End.Seconds() / float64(kinds*servers))
	for _, k := range Kinds {
		for s := range servers {
			n := 0
			if per := c.Completed[k.Name]; s < len(per) {
				n = per[s]
			}
			if n < floor {
				v(InvClientFloor, "%s through kube-apiserver-%d: %d operations succeeded, under the floor of %d (%.0f %% of an even share of %d/s over %s)",
					k.Name, s, n, floor, 100*FloorShare, rate, secs(ours.End))
			}
		}
	}
	return out
}
