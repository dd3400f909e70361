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

// Package alerts makes every alert of artifacts/monitoring/alerts.yaml fire
// and resolve on a real control plane (kube-apiserver v1.36.3 and v1.37.2
// with the filter, two peerdiscovery-apiserver replicas, a
// kube-controller-manager), watched by a real Prometheus server that runs
// in the plane's network namespace with the shipped scrape jobs
// (prometheus-scrape.yaml), RBAC (rbac.yaml) and rules, and a
// ServiceAccount token, TLS verified. Each alert is brought about by a
// fault on the plane, then the fault is undone, and the times are read from
// Prometheus's own alerts API. It runs on demand (hack/test-alerts.sh,
// about 26 minutes): PEERDISCOVERY_ALERTS_E2E=1 and PEERDISCOVERY_PROMETHEUS,
// the path of a prometheus binary (hack/build-prometheus.sh prometheus).
package alerts

import (
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The servers, by index.
const (
	old      = 0 // v1.36.3
	upgraded = 1 // v1.37.2, the only server of four GVRs
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Gate:         "PEERDISCOVERY_ALERTS_E2E",
		Skipped:      "the alerts test runs on demand: hack/test-alerts.sh (PEERDISCOVERY_ALERTS_E2E=1, PEERDISCOVERY_PROMETHEUS=<prometheus binary>)",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			// The local plane's defaults shorten the engine's timings
			// (--tombstone-period 60s for 10m, --refresh-interval 2s for
			// 10s); the rules' `for` is shortened as much as the tombstone
			// (forDivisor), which RoutesUnavailable's `for` must stay
			// below.
			return localcluster.Config{
				Servers:           []localcluster.ServerSpec{{Version: "v1.36.3"}, {Version: "v1.37.2"}},
				ExtensionReplicas: 2,
				SubnetOctet:       93, // apart from test/chaos (88, 89), which may run beside it
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}
