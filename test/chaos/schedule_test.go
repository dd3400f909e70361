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
	"os"
	"reflect"
	"testing"
	"time"
)

// The schedule is a function of the seed, and keeps its constraints.
func TestSchedule(t *testing.T) {
	shape := Shape{Servers: 3, Replicas: 2}
	a, b := NewSchedule(7, shape), NewSchedule(7, shape)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed, two schedules")
	}
	if reflect.DeepEqual(a, NewSchedule(8, shape)) {
		t.Fatal("two seeds, one schedule")
	}
	kinds := map[FaultKind]int{}
	for seed := range uint64(50) {
		for _, ep := range NewSchedule(seed, shape) {
			if len(ep.Faults) < 1 || len(ep.Faults) > 3 {
				t.Fatalf("seed %d: %d faults in %s", seed, len(ep.Faults), ep)
			}
			used, down, replica := map[int]bool{}, 0, 0
			for i, f := range ep.Faults {
				kinds[f.Kind]++
				if i == 0 && f.At != 0 || f.At < 0 || f.At > 10*time.Second || f.Hold < 2*time.Second || f.Hold > 50*time.Second {
					t.Fatalf("seed %d: timing of %s", seed, f)
				}
				for _, s := range f.Servers {
					if used[s] || s < 0 || s >= shape.Servers {
						t.Fatalf("seed %d: server %d twice or out of range in %s", seed, s, ep)
					}
					used[s] = true
				}
				switch f.Kind {
				case KillServer, TermServer, FreezeServer:
					down++
				case KillReplica, KillAllReplicas:
					replica++
				case SlowServer:
					if f.CPUPercent < 5 || f.CPUPercent > 20 {
						t.Fatalf("seed %d: %s", seed, f)
					}
				}
			}
			if down >= shape.Servers || replica > 1 {
				t.Fatalf("seed %d: %d servers down, %d replica faults in %s", seed, down, replica, ep)
			}
		}
	}
	for _, w := range weights {
		if kinds[w.kind] == 0 {
			t.Errorf("no %s in 50 schedules", w.kind)
		}
	}
	if got := Episodes(a, 0, episodeOverhead); len(got) != 0 {
		t.Errorf("%d episodes in no time", len(got))
	}
	eps := Episodes(a, 5*time.Minute, episodeOverhead)
	var used time.Duration
	for _, ep := range eps {
		used += ep.Length() + episodeOverhead
	}
	if used > 5*time.Minute || used+a[len(eps)].Length()+episodeOverhead <= 5*time.Minute {
		t.Errorf("%d episodes take %s of 5m", len(eps), used)
	}
}

// TestPrintSchedule prints the episodes of PEERDISCOVERY_CHAOS_SEED within
// PEERDISCOVERY_CHAOS_DURATION (hack/chaos.sh --plan).
func TestPrintSchedule(t *testing.T) {
	if os.Getenv("PEERDISCOVERY_CHAOS_PLAN") != "1" {
		t.Skip("hack/chaos.sh --plan prints a seed's schedule")
	}
	cfg := soakConfig(t)
	for i, ep := range Episodes(NewSchedule(cfg.Seed, Shape{Servers: len(Versions), Replicas: 2}), cfg.Duration, episodeOverhead) {
		t.Logf("seed %d episode %d: %s", cfg.Seed, i+1, ep)
	}
}
