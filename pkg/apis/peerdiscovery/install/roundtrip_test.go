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

package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
)

// TestRoundTripTypes: every type survives internal -> v1alpha1 -> JSON and
// YAML -> internal unchanged (as sample-apiserver's wardle), so the
// conversions and the generated deep copies cannot lose a field.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, fuzzerFuncs)
}

// fuzzerFuncs: the group has no defaulting or cross-field invariants for
// the fuzzer to respect; apimachinery adds its own for metadata.
func fuzzerFuncs(runtimeserializer.CodecFactory) []interface{} { return nil }
