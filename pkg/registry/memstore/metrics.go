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
	historyBytesGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "store",
		Name:           "history_bytes",
		Help:           "Estimated bytes of superseded objects kept in the event history for watch resumption.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	historyEventsGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "store",
		Name:           "history_events",
		Help:           "Events kept in the event history for watch resumption.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(terminatedWatchers, historyBytesGauge, historyEventsGauge)
	})
}
