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

// What differs in cmd/kube-apiserver/app of Kubernetes v1.37 from v1.36.
// hack/build-kube-apiserver.sh copies this file next to ../main.go when it
// builds a v1.37.x kube-apiserver.

import (
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// prepareRun does what app.Run does before app.NewConfig: since v1.37 the
// options carry the informer name (cache.NewInformerName, new in client-go
// v0.37) that app.NewConfig passes to BuildGenericConfig.
func prepareRun(opts options.CompletedOptions) error {
	if opts.InformerName == nil {
		informerName, err := cache.NewInformerName("kube-apiserver")
		if err != nil {
			return err
		}
		opts.InformerName = informerName
	}
	return nil
}
