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

package discovery

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// scheme holds every type discovery writes:
//   - the aggregated discovery types (apidiscovery.k8s.io/v2);
//   - the legacy discovery types (APIGroupList, APIGroup, APIResourceList),
//     which metav1.AddToGroupVersion registers unversioned at "v1" as
//     kube-apiserver's legacyscheme does, so they are written (JSON, YAML
//     or protobuf) with apiVersion v1.
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	utilruntime.Must(apidiscoveryv2.AddToScheme(scheme))
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
}
