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

package engine

import (
	"sync"

	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// apiserver_peer_discovery_sync_errors_total is upstream's counter,
// incremented through upstream's package (k8s.io/apiserver registers it in
// every server at startup; registering the name again would crash), so
// dashboards built for the built-in proxy keep working.
var (
	scrapeDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "peerdiscovery",
		Name:           "scrape_duration_seconds",
		Help:           "Time to read one peer's /api, /apis and /version, by result.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	heartbeatDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "peerdiscovery",
		Name:           "heartbeat_duration_seconds",
		Help:           "Time to read one peer's /version between full reads (the readiness heartbeat), by result.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	peersGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Name:           "peers",
		Help:           "Known kube-apiserver peers by state (ready, not_ready, left).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	routesGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Name:           "routes",
		Help:           "Routing tables (GVRs) by kind: all, not_served_by_all (proxied somewhere), unavailable (no ready peer).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	computeDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      "peerdiscovery",
		Name:           "compute_duration_seconds",
		Help:           "Time to merge discovery and compute routes from the peers' documents.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		StabilityLevel: metrics.ALPHA,
	})
	publishDecisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "peerdiscovery",
		Name:           "publish_decisions_total",
		Help:           "The engine's loop turns by outcome: published (the view was computed and published: the input changed, or the heartbeat was due) or unchanged (the input equals the last published one; nothing was computed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"decision"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		peerproxymetrics.Register()
		legacyregistry.MustRegister(scrapeDuration, heartbeatDuration, peersGauge, routesGauge, computeDuration, publishDecisions)
	})
}
