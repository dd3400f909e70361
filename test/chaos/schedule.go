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

// Package chaos is the seeded chaos soak: a bounded workload
// (test/workload) on a local plane of three kube-apiservers of two
// releases, two peerdiscovery-apiserver replicas and a
// kube-controller-manager, while faults drawn from a seed hit it one or
// more at a time (SIGKILL, SIGTERM and SIGSTOP of any kube-apiserver; a
// crash of one or of every extension replica; a partition between two
// kube-apiservers; a CPU-starved kube-apiserver), and invariants are
// checked all the time. The same seed runs on plain upstream
// kube-apiservers with the built-in peer proxy, side by side in the same
// invocation.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// FaultKind is what a fault does.
type FaultKind string

// The faults.
const (
	// KillServer SIGKILLs a kube-apiserver (a crash: no departure record)
	// and starts it again after Hold.
	KillServer FaultKind = "sigkill-apiserver"
	// TermServer SIGTERMs a kube-apiserver (a graceful stop through its
	// shutdown delay) and starts it again after Hold (or once it exited).
	TermServer FaultKind = "sigterm-apiserver"
	// FreezeServer SIGSTOPs a kube-apiserver (hung: its connections stay
	// open, nothing answers) and SIGCONTs it after Hold.
	FreezeServer FaultKind = "sigstop-apiserver"
	// Partition cuts the connections between two kube-apiservers, both
	// still reachable from clients, for Hold.
	Partition FaultKind = "partition-apiservers"
	// SlowServer caps a kube-apiserver's CPU at CPUPercent of one core for
	// Hold: it answers, and proxies, slowly.
	SlowServer FaultKind = "slow-apiserver"
	// KillReplica stops one peerdiscovery-apiserver replica with Signal,
	// without taking it out of its Service first, and starts it after Hold.
	KillReplica FaultKind = "kill-extension-replica"
	// KillAllReplicas SIGKILLs every replica at once and starts them all
	// again after Hold (a rollout or a node drain while state was lost).
	KillAllReplicas FaultKind = "kill-all-extension-replicas"
)

// Fault is one fault of an episode.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Servers: the kube-apiserver (two for a partition).
	Servers []int `json:"servers,omitempty"`
	// Replicas: the extension replicas.
	Replicas   []int  `json:"replicas,omitempty"`
	Signal     string `json:"signal,omitempty"`
	CPUPercent int    `json:"cpuPercent,omitempty"`
	// At is from the episode's start; Hold from At to the heal.
	At   time.Duration `json:"at"`
	Hold time.Duration `json:"hold"`
}

func (f Fault) String() string {
	var who string
	switch {
	case len(f.Servers) == 2:
		who = fmt.Sprintf("kube-apiserver-%d | kube-apiserver-%d", f.Servers[0], f.Servers[1])
	case len(f.Servers) == 1:
		who = fmt.Sprintf("kube-apiserver-%d", f.Servers[0])
	case f.Kind == KillAllReplicas:
		who = "every peerdiscovery-apiserver replica"
	default:
		who = fmt.Sprintf("peerdiscovery-apiserver-%d", f.Replicas[0])
	}
	what := map[FaultKind]string{KillServer: "SIGKILL", TermServer: "SIGTERM", FreezeServer: "SIGSTOP", Partition: "partition",
		SlowServer: fmt.Sprintf("CPU capped at %d%%", f.CPUPercent), KillReplica: f.Signal, KillAllReplicas: "SIGKILL"}[f.Kind]
	return fmt.Sprintf("%s %s at +%.1fs for %.1fs", what, who, f.At.Seconds(), f.Hold.Seconds())
}

// Episode is faults that overlap; the next episode starts after every
// one of them healed and the informers were checked.
type Episode struct {
	Faults []Fault `json:"faults"`
}

// Length is from the episode's start to its last heal.
func (e Episode) Length() time.Duration {
	var l time.Duration
	for _, f := range e.Faults {
		l = max(l, f.At+f.Hold)
	}
	return l
}

func (e Episode) String() string {
	var parts []string
	for _, f := range e.Faults {
		parts = append(parts, f.String())
	}
	return strings.Join(parts, "; ")
}

// Shape is what a schedule draws from.
type Shape struct {
	// Servers and Replicas: how many kube-apiservers and extension
	// replicas the plane has.
	Servers, Replicas int
}

// maxEpisodes bounds a schedule (a 30-minute soak runs about 40).
const maxEpisodes = 400

// weights of the fault kinds (out of 100).
var weights = []struct {
	kind   FaultKind
	weight int
}{{KillServer, 20}, {TermServer, 10}, {FreezeServer, 15}, {Partition, 15}, {SlowServer, 10}, {KillReplica, 10}, {KillAllReplicas, 20}}

// NewSchedule draws episodes from seed (math/rand/v2, PCG): one to three
// overlapping faults each, on distinct targets, never more than
// Servers-1 kube-apiservers stopped or frozen at once, at most one
// replica fault per episode. The same seed and shape give the same
// schedule.
func NewSchedule(seed uint64, shape Shape) []Episode {
	rnd := rand.New(rand.NewPCG(seed, 0xc4a05))
	between := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rnd.Int64N(int64(hi-lo)))).Round(100 * time.Millisecond)
	}
	var out []Episode
	for range maxEpisodes {
		n := 1
		switch x := rnd.IntN(100); {
		case x >= 85:
			n = 3
		case x >= 50:
			n = 2
		}
		var ep Episode
		usedServer := map[int]bool{}
		down, replicaFault := 0, false
		for tries := 0; len(ep.Faults) < n && tries < 20; tries++ {
			kind := FaultKind("")
			for x := rnd.IntN(100); kind == ""; {
				for _, w := range weights {
					if x < w.weight {
						kind = w.kind
						break
					}
					x -= w.weight
				}
			}
			f := Fault{Kind: kind}
			free := func() int {
				var c []int
				for i := range shape.Servers {
					if !usedServer[i] {
						c = append(c, i)
					}
				}
				if len(c) == 0 {
					return -1
				}
				return c[rnd.IntN(len(c))]
			}
			switch kind {
			case KillServer, TermServer, FreezeServer:
				s := free()
				if s < 0 || down+1 >= shape.Servers {
					continue
				}
				usedServer[s], down = true, down+1
				f.Servers = []int{s}
				// Up to most of the tombstone period (60 s): long enough
				// for the extension replicas to restart meanwhile.
				f.Hold = between(5*time.Second, 50*time.Second)
				if kind == FreezeServer {
					f.Hold = between(5*time.Second, 20*time.Second)
				}
			case Partition:
				a := free()
				if a < 0 {
					continue
				}
				usedServer[a] = true
				b := free()
				if b < 0 {
					usedServer[a] = false
					continue
				}
				usedServer[b] = true
				f.Servers = []int{min(a, b), max(a, b)}
				f.Hold = between(10*time.Second, 30*time.Second)
			case SlowServer:
				s := free()
				if s < 0 {
					continue
				}
				usedServer[s] = true
				f.Servers = []int{s}
				f.CPUPercent = []int{5, 10, 20}[rnd.IntN(3)]
				f.Hold = between(10*time.Second, 30*time.Second)
			case KillReplica, KillAllReplicas:
				if replicaFault || shape.Replicas == 0 {
					continue
				}
				replicaFault = true
				f.Hold = between(2*time.Second, 15*time.Second)
				if kind == KillAllReplicas {
					for r := range shape.Replicas {
						f.Replicas = append(f.Replicas, r)
					}
					f.Signal = "SIGKILL"
				} else {
					f.Replicas = []int{rnd.IntN(shape.Replicas)}
					f.Signal = []string{"SIGKILL", "SIGTERM"}[rnd.IntN(2)]
				}
			}
			if len(ep.Faults) > 0 {
				f.At = between(0, 10*time.Second)
			}
			ep.Faults = append(ep.Faults, f)
		}
		out = append(out, ep)
	}
	return out
}

// Episodes is the prefix of the schedule whose estimated length fits in
// d: each episode's Length plus overhead (restarts, settling, the
// informer check). It is decided from the schedule alone, so every
// routing of one invocation runs the same episodes.
func Episodes(schedule []Episode, d, overhead time.Duration) []Episode {
	var used time.Duration
	for i, ep := range schedule {
		used += ep.Length() + overhead
		if used > d {
			return schedule[:i]
		}
	}
	return schedule
}
