package replication

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	leaderGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Name:           "replica_leading",
		Help:           "1 when this peerdiscovery-apiserver replica computes and publishes, 0 when it follows the leader.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// RegisterMetrics registers the replication metrics once.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(leaderGauge) })
}
