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

package memstore

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Named like the watch cache's apiserver_terminated_watchers_total and
// apiserver_watch_cache_* series, under this project's prefix.
var (
	terminatedWatchers = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "store",
		Name:           "terminated_watchers_total",
		Help:           "Watchers ended because they did not keep up: their queue exceeded its length or byte budget.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	historyBytesGauge  = historyGauge("history_bytes", "Estimated bytes of superseded objects kept in the event history for watch resumption.")
	historyEventsGauge = historyGauge("history_events", "Events kept in the event history for watch resumption.")
)

// historyGauge is a peerdiscovery_store_<name> gauge of a store's history,
// by resource.
func historyGauge(name, help string) *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "store",
		Name:           name,
		Help:           help,
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
}

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(terminatedWatchers, historyBytesGauge, historyEventsGauge)
	})
}
