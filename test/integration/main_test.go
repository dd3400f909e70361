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

// Package integration runs peerdiscovery-apiserver in-process against a real
// kube-apiserver (etcd and kube-apiserver v1.37.2 built from the module
// proxy, see hack/build-all.sh) that it delegates authentication and
// authorization to, and drives it with the generated clientset, a shared
// informer and raw requests. Views are published directly: the peer engine
// is tested on its own (pkg/engine) and end to end (test/e2e).
package integration

import (
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "integration tests need real etcd and kube-apiserver binaries: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 15 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			// WatchList is client-go's default in v0.37; make it explicit so
			// the informer test exercises it whatever the default.
			os.Setenv("KUBE_FEATURE_WatchListClient", "true")
			return localcluster.Config{
				Servers:           []localcluster.ServerSpec{{Version: "v1.37.2"}},
				ExtensionReplicas: -1,
				// The engine's tests need no controllers.
				ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
				SubnetOctet:       80,
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run against real etcd and kube-apiserver")
	}
}
