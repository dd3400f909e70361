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

package metrics

import (
	"context"

	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
)

// Upstream's peer-proxy counters, through upstream's package (k8s.io/apiserver
// v0.36 and later). A v1.35 build uses upstream_k8s135.go instead:
// the only place where the filter's source differs between releases.

func registerUpstreamMetrics() { peerproxymetrics.Register() }

func incRerouted(ctx context.Context, code string, l Labels) {
	peerproxymetrics.IncPeerProxiedRequest(ctx, code, l.Group, l.Version, l.Resource)
}

func incProxyError(ctx context.Context, typ string, l Labels) {
	peerproxymetrics.IncPeerProxyError(ctx, typ, l.Group, l.Version, l.Resource)
}
