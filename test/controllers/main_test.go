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

// Package controllers runs a real kube-controller-manager's garbage
// collector and namespace controller on a mixed-version control plane
// (internal/localcluster): kube-apiserver v1.36.3 with policy/v1 turned off,
// which the controller manager (v1.36.3) talks to only, and v1.37.2, the
// only server of PodDisruptionBudgets and StorageVersionMigrations. Both
// controllers decide what to delete from discovery and from 404s: the
// filter must give them the whole cluster, and 503 (never 404) while the
// only capable server is away.
package controllers

import (
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The servers, by index.
const (
	old     = 0 // v1.36.3, policy/v1 off; the controller manager's server
	capable = 1 // v1.37.2
)

var cluster *localcluster.Cluster

// routing is what routes requests between the servers
// (PEERDISCOVERY_ROUTING): peerdiscovery in CI; upstream or none on demand,
// to measure the same scenarios beside it.
var routing localcluster.Routing

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "controller tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 20 * time.Minute,
		Plane: func(r localcluster.Routing) (localcluster.Config, error) {
			routing = r
			cfg := localcluster.Config{
				Servers: []localcluster.ServerSpec{
					{Version: "v1.36.3", ExtraFlags: []string{"--runtime-config=policy/v1=false"}},
					{Version: "v1.37.2"},
				},
				ControllerManager: localcluster.ControllerManagerSpec{
					Server:      old,
					Controllers: []string{"namespace-controller", "garbage-collector-controller", "serviceaccount-controller"},
				},
				ExtensionReplicas: 1,
				SubnetOctet:       81,
			}
			return cfg, routing.Apply(&cfg)
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
}
