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

package peerdiscovery

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	viewUpdated = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Name:           "view_last_update_timestamp_seconds",
		Help:           "Unix time of the last view this replica computed. /readyz fails when it is older than --stale-after.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(viewUpdated) })
}

func markViewUpdated(t time.Time) {
	viewUpdated.Set(float64(t.UnixNano()) / 1e9)
}
