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

// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-model-package=io.k8s.peerdiscovery.v1alpha1
// +groupName=peerdiscovery.k8s.io

// Package v1alpha1 is version v1alpha1 of the peerdiscovery.k8s.io API:
// computed, read-only objects describing the kube-apiservers of a control
// plane and how requests are routed between them.
package v1alpha1
