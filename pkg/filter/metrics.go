package filter

import (
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Upstream's names (subsystem "apiserver") are kept so dashboards built for
// the built-in peer proxy keep working; the built-in proxy is off in
// servers that carry this filter, so the names do not collide.
var (
	reroutedRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "apiserver",
		Name:           "rerouted_request_total",
		Help:           "Total number of requests that were proxied to a peer kube-apiserver because the local apiserver was not capable of serving it, by code, group, version and resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code", "group", "version", "resource"})
	proxyErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "apiserver",
		Name:           "peer_proxy_errors_total",
		Help:           "Total number of errors encountered while proxying requests to a peer kube-apiserver, by type (connect: retried on the next peer; proxy: failed after the peer was reached; unavailable: answered 503).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"type", "group", "version", "resource"})
	proxyLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "proxy_duration_seconds",
		Help:           "Time to proxy a request to a peer, until its response was complete (watches: until they ended), by group and resource.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"group", "resource"})
	cacheSynced = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "cache_synced",
		Help:           "1 when the filter's routing caches are synced and it routes requests to peers; 0 while it serves everything locally.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		for _, c := range []metrics.Registerable{reroutedRequests, proxyErrors, proxyLatency, cacheSynced} {
			// Register, not MustRegister: a name already taken must not
			// crash kube-apiserver.
			if err := legacyregistry.Register(c); err != nil {
				klog.InfoS("peerdiscovery filter: metric not registered", "err", err)
			}
		}
	})
}

func proxied(gvr schema.GroupVersionResource, code int, took time.Duration) {
	reroutedRequests.WithLabelValues(strconv.Itoa(code), gvr.Group, gvr.Version, gvr.Resource).Inc()
	proxyLatency.WithLabelValues(gvr.Group, gvr.Resource).Observe(took.Seconds())
}

func proxyError(typ string, gvr schema.GroupVersionResource) {
	proxyErrors.WithLabelValues(typ, gvr.Group, gvr.Version, gvr.Resource).Inc()
}

func unavailableTotal(gvr schema.GroupVersionResource) {
	proxyErrors.WithLabelValues("unavailable", gvr.Group, gvr.Version, gvr.Resource).Inc()
}
