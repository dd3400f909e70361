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

// Package metrics holds the filter's metrics: its own
// (peerdiscovery_filter_*) and upstream's peer-proxy counters, whose names
// and labels are upstream's so that dashboards built for the built-in peer
// proxy keep working. Every label value comes from routing state or is one
// of the fixed values documented here, never from a client.
package metrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Upstream's counters (apiserver_rerouted_request_total,
// apiserver_peer_proxy_errors_total) are incremented through upstream's own
// package: every kube-apiserver registers them at startup even with the
// built-in proxy off, so registering the names again would crash it, and
// dashboards built for the built-in proxy keep working.
var (
	proxyLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "proxy_duration_seconds",
		Help:           "Time to proxy a request to a peer, until its response was complete (watches: until they ended), by group and resource.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"group", "resource"})
	filterEnabled = filterGauge("enabled",
		"1 when the filter is configured (--peer-ca-file set) and routes requests to peers; 0 when this kube-apiserver runs without it.")
	// InformerRelists is exported for the views' tests.
	InformerRelists = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "relists_total",
		Help:           "Full relists of the filter's routing caches after their first sync, by resource: each is a watch that could not resume (410 Gone, or a resourceVersion another peerdiscovery-apiserver replica did not know).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	discoveryRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "discovery_requests_total",
		Help:           "Discovery and OpenAPI v3 requests by endpoint (aggregated, group_list, group, resource_list, openapi_v3, openapi_v3_group_version) and by who answered: merged (the peer-aggregated view), peer (proxied to a peer serving more of it), local (this server's own answer, the same as the cluster's) or unavailable (503: only departed or not-ready servers serve it).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"endpoint", "source"})
	cacheSynced = filterGauge("cache_synced",
		"1 when the filter's routing caches are synced and it routes requests to peers; 0 while it serves everything locally.")
	peerRouted = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "peer_routed_requests_total",
		Help:           "Requests for APIs this kube-apiserver does not serve itself, which it routed to peers, by the status code the client got: the peer's when proxied, 503 when no peer could take the request (none ready or reachable, or the routing view not caught up), 502 or 504 when the peer failed after the request was sent. Requests the client gave up on are not counted. Its 5xx share is the proxied requests' SLO (docs/operations.md).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"code"})
	informerInput = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           "informer_last_input_timestamp_seconds",
		Help:           "When each routing informer (peerroutingtables, apiserverpeers, peeraggregateddiscoveries) last received anything from peerdiscovery-apiserver: a list, a watch event, or a bookmark (sent every 10 s to an idle watch). time() minus it is how old the routing input is.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
)

// filterGauge is a peerdiscovery_filter_<name> gauge that is 0 or 1.
func filterGauge(name, help string) *metrics.Gauge {
	return metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Subsystem:      "filter",
		Name:           name,
		Help:           help,
		StabilityLevel: metrics.ALPHA,
	})
}

var registerOnce sync.Once

// Register registers the metrics once; a name already taken is logged,
// never fatal.
func Register() {
	registerOnce.Do(func() {
		registerUpstreamMetrics()
		for _, c := range []metrics.Registerable{proxyLatency, filterEnabled, cacheSynced, InformerRelists, discoveryRequests, peerRouted, informerInput} {
			// Register, not MustRegister: a name already taken must not
			// crash kube-apiserver. Called from New, which no context
			// reaches: the process's logger.
			if err := legacyregistry.Register(c); err != nil {
				klog.Background().Info("peerdiscovery filter: metric not registered", "err", err)
			}
		}
	})
}

// Labels are the group, version and resource labels of upstream's
// peer-proxy counters (proxy_duration_seconds takes the group and the
// resource). They are a metric's labels, not an API: status.Subject builds
// them from routing state (a resource, a group-version's documents), or
// use one of the fixed values below.
type Labels struct {
	Group, Version, Resource string
}

// Other is the value of every label of a request whose group, version and
// resource no routing state knows (unsynced, unrouted): a client can name
// anything, and each name would be a new series.
const Other = "other"

// UnknownLabels label a request that Other stands for.
var UnknownLabels = Labels{Group: Other, Version: Other, Resource: Other}

// OpenAPIRootLabels label the reading of a peer's /openapi/v3 root
// document, which belongs to no group-version: group "openapi", version
// "v3", the path's own names.
var OpenAPIRootLabels = Labels{Group: "openapi", Version: "v3"}

// Proxied counts a request a peer answered, with the code the client got
// and how long it took.
func Proxied(ctx context.Context, l Labels, code int, took time.Duration) {
	incRerouted(ctx, strconv.Itoa(code), l)
	proxyLatency.WithLabelValues(l.Group, l.Resource).Observe(took.Seconds())
	peerRouted.WithLabelValues(strconv.Itoa(code)).Inc() // as RoutedAnswer
}

// RoutedAnswer counts what the client got for a request routed to peers.
func RoutedAnswer(code int) {
	peerRouted.WithLabelValues(strconv.Itoa(code)).Inc()
}

// Error types of ProxyError.
const (
	// ErrorConnect: the peer was not reached; the next is tried.
	ErrorConnect = "connect"
	// ErrorProxy: failed after the peer may have received the request.
	ErrorProxy = "proxy"
	// ErrorCanceled: the client left or the deadline passed.
	ErrorCanceled = "canceled"
	// ErrorUnavailable: answered 503, no peer could take it.
	ErrorUnavailable = "unavailable"
	// ErrorUnsynced: answered 503 before the routing state synced
	// (labelled UnknownLabels).
	ErrorUnsynced = "unsynced"
	// ErrorUnrouted: answered 503 while the view lags behind a live
	// server's Lease (labelled UnknownLabels).
	ErrorUnrouted = "unrouted"
)

// ProxyError counts an error of one of the types above.
func ProxyError(ctx context.Context, typ string, l Labels) {
	incProxyError(ctx, typ, l)
}

// Endpoints (what was asked) and sources (who answered) of
// DiscoveryServed.
const (
	EndpointAggregated          = "aggregated"
	EndpointGroupList           = "group_list"
	EndpointGroup               = "group"
	EndpointResourceList        = "resource_list"
	EndpointOpenAPI             = "openapi_v3"
	EndpointOpenAPIGroupVersion = "openapi_v3_group_version"

	SourceMerged      = "merged"
	SourcePeer        = "peer"
	SourceLocal       = "local"
	SourceUnavailable = "unavailable"
)

// DiscoveryServed counts a discovery or OpenAPI request.
func DiscoveryServed(endpoint, source string) {
	discoveryRequests.WithLabelValues(endpoint, source).Inc()
}

// SetEnabled reports whether the filter is configured.
func SetEnabled(on bool) { filterEnabled.Set(boolGauge(on)) }

// SetCacheSynced reports whether the routing caches are synced.
func SetCacheSynced(on bool) { cacheSynced.Set(boolGauge(on)) }

// Relisted counts a full relist of the routing informer of resource.
func Relisted(resource string) { InformerRelists.WithLabelValues(resource).Inc() }

// InputStamp is the gauge of when the routing informer of resource last
// received anything.
func InputStamp(resource string) metrics.GaugeMetric {
	return informerInput.WithLabelValues(resource)
}

func boolGauge(on bool) float64 {
	if on {
		return 1
	}
	return 0
}
