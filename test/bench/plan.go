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

// Package bench measures what the peerdiscovery filter costs at scale, on
// real control planes, side by side with direct requests and with
// upstream's built-in peer proxy (plain kube-apiservers of the same
// releases with UnknownVersionInteroperabilityProxy on), in one run:
// both planes run at once and every measurement alternates between them,
// so background load hits both alike. hack/bench.sh runs it; the figures
// are ratios to direct within the same run.
//
//   - LIST of many objects of a v1.37-only resource through v1.36.3: time,
//     bytes/s, time to first byte; JSON and protobuf, gzip or not, one page
//     or pages of 500.
//   - WATCH: many watchers through v1.36.3, a steady rate of changes:
//     delivery latency from each write's acknowledgement, the source
//     server's memory, every change seen by every watcher.
//   - Full load: closed-loop GETs at concurrency 1..64, the highest rate
//     at which p99 stays under 100 ms.
//   - The filter's own cost: memory (RSS, live heap after a GC) and CPU
//     time of each kube-apiserver against the plain upstream binary of
//     the same release, idle and with many CRDs, and heap profiles.
package bench

import (
	"fmt"
	"time"
)

// Scale is how much each measurement does. Every loop is bounded by it in
// count and in time.
type Scale struct {
	Name string `json:"name"`

	// ListObjects StorageVersionMigrations of about ListObjectBytes each
	// (as JSON, as the server returns them) are listed ListRounds times
	// per path and variant.
	ListObjects     int `json:"listObjects"`
	ListObjectBytes int `json:"listObjectBytes"`
	ListRounds      int `json:"listRounds"`
	ListPageSize    int `json:"listPageSize"`

	// Watchers watch through each path while WatchRate changes per second
	// are written for WatchDuration, over WatchObjects objects.
	Watchers      int           `json:"watchers"`
	WatchRate     int           `json:"watchRate"`
	WatchDuration time.Duration `json:"watchDuration"`
	WatchObjects  int           `json:"watchObjects"`

	// LoadConcurrency are the closed-loop concurrencies; each runs
	// LoadStep per path, LoadRounds times.
	LoadConcurrency []int         `json:"loadConcurrency"`
	LoadStep        time.Duration `json:"loadStep"`
	LoadRounds      int           `json:"loadRounds"`

	// CostServers are the releases of the cost planes' kube-apiservers.
	// CostGVRs extra resources are added in two steps: CostCRDs CRDs
	// (fewer if memory runs short: see CostMemoryReserve), then the rest
	// as resources of aggregated APIServices (a stub server's). Once both
	// planes are quiet (WaitQuiet), RSS is measured over a CostWindow
	// from CostSettle and over another from CostSteadyAt; CPU over the
	// second.
	CostServers []string      `json:"costServers"`
	CostGVRs    int           `json:"costGVRs"`
	CostCRDs    int           `json:"costCRDs"`
	CostSettle  time.Duration `json:"costSettle"`
	// CostSteadyAt is when, after both planes were quiet, the second
	// window (the steady one: see CostState.EarlyRSS) starts.
	CostSteadyAt time.Duration `json:"costSteadyAt"`
	CostWindow   time.Duration `json:"costWindow"`
	// CostGoalWindow is the steady window of the last state, the one the
	// goals judge (CostWindow is every other window). At full scale it is
	// one period of kube-apiserver's 5-minute informer resyncs
	// (apiextensions' CRD informer, whose resync makes the OpenAPI v3
	// controller rebuild every CRD's spec: 0.8–0.9 GB per server at 1,000
	// CRDs; kube-aggregator's APIService informer): a window of one period
	// holds each server's burst once, whatever its phase, where a
	// 60 s window held it for whichever plane's phase fell there.
	CostGoalWindow    time.Duration `json:"costGoalWindow"`
	CostMemoryReserve int64         `json:"costMemoryReserve"`

	// ProfileSeconds is the length of each CPU profile of the proxied
	// paths' servers (0: none).
	ProfileSeconds int `json:"profileSeconds"`
}

// The releases: the source of every proxied request is the older one,
// which does not serve storagemigration.k8s.io/v1.
const (
	OldVersion = "v1.36.3"
	NewVersion = "v1.37.2"
)

// FullScale is issue #31's: 10,000 objects of ~1 KB, 1,000 watchers at
// 100 changes/s for 60 s, c=1..64, 5 servers per plane with 5,000 extra
// GVRs. Only 1,000 of those are CRDs: a CRD costs each kube-apiserver
// about 1.5 MiB (docs/operations.md, "Sizing"), and 10 servers × 5,000
// CRDs would need 75 GiB; the rest are aggregated APIServices' resources.
func FullScale() Scale {
	return Scale{
		Name:        "full",
		ListObjects: 10000, ListObjectBytes: 1024, ListRounds: 5, ListPageSize: 500,
		Watchers: 1000, WatchRate: 100, WatchDuration: 60 * time.Second, WatchObjects: 100,
		LoadConcurrency: []int{1, 2, 4, 8, 16, 32, 64}, LoadStep: 4 * time.Second, LoadRounds: 2,
		CostServers: []string{OldVersion, OldVersion, NewVersion, NewVersion, NewVersion},
		CostGVRs:    5000, CostCRDs: 1000, CostSettle: 45 * time.Second, CostWindow: 60 * time.Second,
		CostSteadyAt:      150 * time.Second,
		CostGoalWindow:    5 * time.Minute,
		CostMemoryReserve: 4 << 30,
		ProfileSeconds:    10,
	}
}

// SmokeScale runs every measurement briefly, to check the suite.
func SmokeScale() Scale {
	return Scale{
		Name:        "smoke",
		ListObjects: 500, ListObjectBytes: 1024, ListRounds: 2, ListPageSize: 100,
		Watchers: 50, WatchRate: 20, WatchDuration: 10 * time.Second, WatchObjects: 10,
		LoadConcurrency: []int{1, 4, 16}, LoadStep: time.Second, LoadRounds: 1,
		CostServers: []string{OldVersion, NewVersion, NewVersion},
		CostGVRs:    300, CostCRDs: 100, CostSettle: 15 * time.Second, CostWindow: 15 * time.Second,
		CostSteadyAt:      40 * time.Second,
		CostGoalWindow:    15 * time.Second,
		CostMemoryReserve: 4 << 30,
		ProfileSeconds:    2,
	}
}

// ScaleNamed is FullScale or SmokeScale by name.
func ScaleNamed(name string) (Scale, error) {
	switch name {
	case "full":
		return FullScale(), nil
	case "smoke", "":
		return SmokeScale(), nil
	}
	return Scale{}, fmt.Errorf("scale %q: want full or smoke", name)
}
