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

package server

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	baseversion "k8s.io/component-base/version"
)

// TestFeatureGatesAtTheLibrariesRelease: whatever version the build
// stamps, the server's feature gates are those of the Kubernetes release
// of its libraries. hack/test-unit.sh runs this test again with the image
// build's stamp (VERSION): with v0.1.0 k8s.io/apiserver emulated
// Kubernetes 0.1, every versioned gate was off, and watch-lists of
// peerdiscovery resources got 422.
func TestFeatureGatesAtTheLibrariesRelease(t *testing.T) {
	t.Logf("built as %s", baseversion.Get().GitVersion)
	want := version.MustParse(baseversion.DefaultKubeBinaryVersion)
	if got := utilfeature.DefaultMutableFeatureGate.EmulationVersion(); !got.EqualTo(want) {
		t.Errorf("feature gates emulate Kubernetes %s, want %s", got, want)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.WatchList) {
		t.Error("WatchList is off: informers of peerdiscovery resources cannot watch-list")
	}
}
