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

// Package upgradedrill rolls a local control plane of three kube-apiservers
// from one release to the next, one server at a time, and one back, while
// a bounded workload and informers keep using it; then it checks what the
// clients saw: lost or duplicated writes, false 404s, informers that
// drifted, errors left after client-go's retries, latency, and how fast
// routing followed each step. The same drill runs on this project and on
// upstream's built-in peer proxy (localcluster.Routing).
package upgradedrill

import (
	"fmt"
	"time"
)

// Plan is one drill.
type Plan struct {
	// From is the release the servers start at; To the one they roll to.
	From, To string
	// Rate is the workload's operations per second, over all servers.
	Rate int
	// Workers bounds the operations in flight.
	Workers int
	// Warmup runs the workload before the first step; Settle after each
	// step's server is ready again; Tail after the last step.
	Warmup, Settle, Tail time.Duration
	// ShutdownDelay is every server's --shutdown-delay-duration: after
	// SIGTERM it keeps serving while /readyz fails, so a load balancer
	// drains it.
	ShutdownDelay time.Duration
	// HealthCheckLag is how long after SIGTERM the load balancer in front
	// of the servers stops sending them new requests.
	HealthCheckLag time.Duration
	// NamespaceEvery and NamespaceLife pace the workload's short-lived
	// namespaces (created, filled, deleted).
	NamespaceEvery, NamespaceLife time.Duration
	// MaxDuration bounds the whole workload whatever happens.
	MaxDuration time.Duration
	// Seed makes the operation mix repeatable.
	Seed uint64
}

// FullPlan is hack/upgrade-drill.sh's drill: about 75 operations per
// second for at most 5 minutes.
func FullPlan() Plan {
	return Plan{From: "v1.36.3", To: "v1.37.2", Rate: 75, Workers: 32,
		Warmup: 20 * time.Second, Settle: 20 * time.Second, Tail: 20 * time.Second,
		ShutdownDelay: 10 * time.Second, HealthCheckLag: time.Second,
		NamespaceEvery: 10 * time.Second, NamespaceLife: 10 * time.Second,
		MaxDuration: 6 * time.Minute, Seed: 1}
}

// ShortPlan is the end-to-end suite's drill: at most 4 minutes.
func ShortPlan() Plan {
	p := FullPlan()
	p.Rate, p.Warmup, p.Settle, p.Tail = 50, 10*time.Second, 8*time.Second, 8*time.Second
	p.ShutdownDelay, p.MaxDuration = 5*time.Second, 4*time.Minute
	p.NamespaceEvery, p.NamespaceLife = 5*time.Second, 8*time.Second
	return p
}

// Step replaces one server's binary.
type Step struct {
	// Server is the index of the server, or PickProxiedTo.
	Server  int    `json:"server"`
	Version string `json:"version"`
}

// PickProxiedTo as a Step's server is the server the others proxied to
// most since the previous step's server was ready, chosen when the step
// starts.
const PickProxiedTo = -1

func (s Step) String() string {
	if s.Server == PickProxiedTo {
		return "the server proxied to most, restarted at " + s.Version
	}
	return fmt.Sprintf("kube-apiserver-%d to %s", s.Server, s.Version)
}

// Steps rolls every server to To, then server 0 back to From; then the
// server of To that server 0 proxies the newer APIs to restarts: the
// step that measures how fast the other servers leave a stopping peer.
func (p Plan) Steps() []Step {
	return []Step{{0, p.To}, {1, p.To}, {2, p.To}, {0, p.From}, {PickProxiedTo, p.To}}
}
