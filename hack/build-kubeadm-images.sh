#!/usr/bin/env bash
# Copyright The peerdiscovery Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# hack/build-kubeadm-images.sh [VERSION...] builds, daemonless, the images
# a kubeadm control plane runs, under the names kubeadm gives them with its
# default imageRepository (registry.k8s.io), from components built here
# from the Go module proxy: kube-apiserver (plain upstream),
# kube-controller-manager, kube-scheduler, etcd and pause; and the filter
# build of kube-apiserver under the name docs/operations.md patches in
# (registry.example.com/kube-apiserver-peerdiscovery:VERSION). All run as
# root, as upstream's do (kubeadm mounts root-only files into them).
# kube-proxy and CoreDNS have no image: the kubeadm plane skips their
# addon phases (kube-proxy runs from its binary on each node). Archives and images.json go to _output/images/kubeadm.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

# The pause tag kubeadm v1.36 and v1.37 expect (kubeadm config images list).
PAUSE_TAG="3.10.2"
# etcd as kubeadm names its images (<version>-0); pinned in the kubeadm
# plane's ClusterConfiguration (etcd.local.imageTag) so that an upgrade
# leaves it alone.
ETCD_TAG="${ETCD_VERSION#v}-0"

versions=("$@")
((${#versions[@]})) || read -r -a versions <<<"${DEFAULT_KUBE_VERSIONS}"
out="${OUTPUT_DIR}/images/kubeadm"
bins="${OUTPUT_DIR}/images/bin"
mkdir -p "${out}" "${bins}"
start="$(date +%s)"

"${REPO_ROOT}/hack/build-etcd.sh"
"${REPO_ROOT}/hack/build-crictl.sh"
log::info "building pause and the image builder"
(
  cd "${REPO_ROOT}/hack/images"
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "${bins}/pause" ./pause
  go build -o "${bins}/build-images" .
)
images=(
  "--image" "pause,registry.k8s.io/pause:${PAUSE_TAG},${bins}/pause"
  "--image" "upstream,registry.k8s.io/etcd:${ETCD_TAG},$(etcd_bin)"
)
# kube-proxy runs from its binary on each node, at the first release.
KUBE_NODE_COMPONENTS=kube-proxy "${REPO_ROOT}/hack/build-kube-node.sh" "${versions[0]}"
for v in "${versions[@]}"; do
  "${REPO_ROOT}/hack/build-kube-apiserver.sh" "${v}"
  "${REPO_ROOT}/hack/build-kube-apiserver-upstream.sh" "${v}"
  "${REPO_ROOT}/hack/build-kube-controller-manager.sh" "${v}"
  KUBE_NODE_COMPONENTS="kube-scheduler kubelet kubeadm" "${REPO_ROOT}/hack/build-kube-node.sh" "${v}"
  images+=(
    "--image" "upstream,registry.example.com/kube-apiserver-peerdiscovery:${v},$(kube_apiserver_bin "${v}")"
    "--image" "upstream,registry.k8s.io/kube-apiserver:${v},$(kube_apiserver_upstream_bin "${v}")"
    "--image" "upstream,registry.k8s.io/kube-controller-manager:${v},$(kube_controller_manager_bin "${v}")"
    "--image" "upstream,registry.k8s.io/kube-scheduler:${v},$(kube_scheduler_bin "${v}")"
  )
done
"${bins}/build-images" --out "${out}" "${images[@]}"
log::info "kubeadm images written to ${out} in $(elapsed_since "${start}")"
