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

// Package conformance runs upstream's own e2e tests through each
// kube-apiserver of a mixed-version control plane (v1.36.3 + v1.37.2, the
// internal/localcluster default): the committed selection of selection.txt,
// with hack/conformance.sh, as a user runs it against hack/local-up.sh.
// Through the older server the newer release's APIs are reached only
// through the filter, so the same suite passing through both servers, test
// by test, is the outside judge of "one cluster during an upgrade".
package conformance

import (
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

var (
	cluster *localcluster.Cluster
	// routing is PEERDISCOVERY_ROUTING: peerdiscovery in CI; upstream (its
	// built-in proxy) or none on demand, to measure the same suite beside it.
	routing localcluster.Routing
)

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "conformance tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 20 * time.Minute,
		Plane: func(r localcluster.Routing) (localcluster.Config, error) {
			routing = r
			cfg := localcluster.Config{SubnetOctet: 84}
			if routing != localcluster.RoutingPeerDiscovery {
				cfg.SubnetOctet = 85 // can run beside the CI configuration
			}
			return cfg, routing.Apply(&cfg)
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}
