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

// Package e2e runs the end-to-end suite on a real local mixed-version
// control plane (internal/localcluster): etcd, kube-apiserver v1.36.3 and two
// v1.37.2 with the filter linked in, two peerdiscovery-apiserver replicas
// behind a real APIService, driven with client-go and kubectl. No fakes.
package e2e

import (
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The servers, by index.
const (
	old  = 0 // v1.36.3, certificates.k8s.io/v1 turned off
	new1 = 1 // v1.37.2
	new2 = 2 // v1.37.2
)

// tombstone is short so the suite sees a tombstone expire.
const tombstone = 90 * time.Second

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "end-to-end tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			return localcluster.Config{
				Servers: []localcluster.ServerSpec{
					{Version: "v1.36.3", ExtraFlags: []string{"--runtime-config=certificates.k8s.io/v1=false"}},
					{Version: "v1.37.2"},
					{Version: "v1.37.2"},
				},
				ExtensionReplicas: 2,
				TombstonePeriod:   tombstone,
				SubnetOctet:       79,
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}
