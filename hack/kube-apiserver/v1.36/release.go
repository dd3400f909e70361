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

// Portions of this file follow Kubernetes code (Copyright The Kubernetes
// Authors, Apache License 2.0), as named where they do.

package main

// What differs in cmd/kube-apiserver/app of Kubernetes v1.36 (and v1.35,
// whose v1.35/release.go links here: its app.Run is the same) from v1.37.
// hack/build-kube-apiserver.sh copies this file next to ../main.go when it
// builds a v1.36.x or v1.35.x kube-apiserver.

import (
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// prepareRun does what app.Run does before app.NewConfig: nothing in v1.35
// and v1.36 (the options have no InformerName yet; it came with v1.37).
func prepareRun(options.CompletedOptions) error {
	return nil
}
