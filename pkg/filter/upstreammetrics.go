//go:build !peerdiscovery_k8s135

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

package filter

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
)

// Upstream's peer-proxy counters, through upstream's package (k8s.io/apiserver
// v0.36 and later). A v1.35 build uses upstreammetrics_k8s135.go instead:
// the only place where the filter's source differs between releases.

func registerUpstreamMetrics() { peerproxymetrics.Register() }

func incRerouted(ctx context.Context, code string, gvr schema.GroupVersionResource) {
	peerproxymetrics.IncPeerProxiedRequest(ctx, code, gvr.Group, gvr.Version, gvr.Resource)
}

func incProxyError(ctx context.Context, typ string, gvr schema.GroupVersionResource) {
	peerproxymetrics.IncPeerProxyError(ctx, typ, gvr.Group, gvr.Version, gvr.Resource)
}
