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

package views

// Helpers of the views' tests; the fixtures they share with the
// filter's tests are in internal/filtertest (fixtures_test.go).

import (
	"os"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

const selfID = "apiserver-self"

var (
	podsGVR         = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	widgetsGVR      = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	nodesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	appsDeployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// servingWant is what localServing records.
var servingWant = []peerlease.ServedResource{
	{GroupVersionResource: nodesGVR, Scope: apidiscoveryv2.ScopeCluster},
	{GroupVersionResource: podsGVR, Scope: apidiscoveryv2.ScopeNamespace},
	{GroupVersionResource: appsDeployments, Scope: apidiscoveryv2.ScopeNamespace},
}

// TestMain registers the filter's metrics before any test runs, as the
// filter's New does: a test registering them while an earlier test's
// informer goroutines still set a gauge is a data race.
func TestMain(m *testing.M) {
	metrics.Register()
	os.Exit(m.Run())
}
