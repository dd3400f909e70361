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

// Package nodeplane holds the end-to-end test of the node-based plane
// (internal/localcluster NodesSpec): three nodes, each a containerd and a
// kubelet v1.36.3 running its kube-apiserver as a static pod from the
// images of hack/build-images.sh; peerdiscovery-apiserver installed with
// `kubectl apply -k` and hack/deploy-certs.sh; then a kubeadm-style
// upgrade, one manifest at a time, v1.36.3 -> v1.37.2, with a rollout
// restart of the extension's Deployment in the middle, under the upgrade
// drill's workload.
//
// hack/test.sh runs the short variant (one node upgraded, the drill's
// short workload); PEERDISCOVERY_NODES=full upgrades all three under the
// full workload.
package nodeplane
