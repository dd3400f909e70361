//go:build peerdiscovery_k8s135

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

package metrics

import (
	"context"

	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// k8s.io/apiserver v0.35 (kube-apiserver v1.35, built with the tag
// peerdiscovery_k8s135 by hack/build-kube-apiserver.sh) registers
// apiserver_rerouted_request_total with the label code only and has no
// apiserver_peer_proxy_errors_total. The filter keeps upstream's names: it
// counts reroutes through upstream's package (the group/version/resource
// labels do not exist there) and registers the error counter itself, with
// v0.36's name, help and labels, which no v1.35 component registers.
var peerProxyErrors = metrics.NewCounterVec(&metrics.CounterOpts{
	Subsystem:      "apiserver",
	Name:           "peer_proxy_errors_total",
	Help:           "Total number of errors encountered while proxying requests to a peer kube apiserver",
	StabilityLevel: metrics.ALPHA,
}, []string{"type", "group", "version", "resource"})

func registerUpstreamMetrics() {
	peerproxymetrics.Register()
	if err := legacyregistry.Register(peerProxyErrors); err != nil {
		klog.Background().Info("peerdiscovery filter: metric not registered", "err", err)
	}
}

func incRerouted(ctx context.Context, code string, _ Labels) {
	peerproxymetrics.IncPeerProxiedRequest(ctx, code)
}

func incProxyError(ctx context.Context, typ string, l Labels) {
	peerProxyErrors.WithContext(ctx).WithLabelValues(typ, l.Group, l.Version, l.Resource).Inc()
}
