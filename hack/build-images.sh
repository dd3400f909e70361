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

# Builds the container images of this project without a container daemon,
# as OCI image archives (an OCI image layout in one tar file) under
# _output/images/, with hack/images (github.com/google/go-containerregistry):
#
#   peerdiscovery-apiserver-VERSION.tar   registry.k8s.io/peerdiscovery/peerdiscovery-apiserver:VERSION
#       the Dockerfile's image: the static binary (built with the
#       Dockerfile's flags) on a distroless-like nonroot base, user 65532
#   kube-apiserver-vX.Y.Z.tar             registry.k8s.io/peerdiscovery/kube-apiserver:vX.Y.Z
#       kube-apiserver with the filter (hack/build-kube-apiserver.sh), one per
#       --kube-versions release (default: ${KUBE_VERSIONS}); what a kubeadm
#       user points imageRepository at
#   kube-controller-manager-${KUBE_NODE_VERSION}.tar, kube-scheduler-${KUBE_NODE_VERSION}.tar
#       plain upstream components, for the node-based plane's static pods
#   pause-3.10.1.tar                      registry.k8s.io/peerdiscovery/pause:3.10.1
#       the Pods' sandbox (hack/images/pause)
#
# Every image is a shared base layer (users, CA certificates, time zones;
# no shell) plus one layer with its binary; file times are
# SOURCE_DATE_EPOCH (default 0), so equal inputs give equal digests.
# images.json lists the references, digests and sizes. Import one with
#   ctr -n k8s.io images import _output/images/kube-apiserver-v1.37.2.tar
# The Dockerfile stays for users with a daemon; hack/images's tests check
# that the archive and the Dockerfile agree (entrypoint, user, ports,
# files, build flags).
#
# Usage: hack/build-images.sh [--kube-versions "v1.36.3 v1.37.2"] [--no-kube]
#   --no-kube   only peerdiscovery-apiserver and pause (no Kubernetes build)
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/golang.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/golang.sh"

REGISTRY="registry.k8s.io/peerdiscovery"
PAUSE_TAG="3.10.1"
IMAGES_DIR="${OUTPUT_DIR}/images"

kube_versions="${KUBE_VERSIONS}"
kube=1
while (($# > 0)); do
  case "${1}" in
  --kube-versions)
    (($# >= 2)) || die "--kube-versions needs a value"
    kube_versions="${2}"
    shift 2
    ;;
  --kube-versions=*)
    kube_versions="${1#*=}"
    shift
    ;;
  --no-kube)
    kube=0
    shift
    ;;
  *) die "unknown argument ${1} (usage: hack/build-images.sh [--kube-versions \"V...\"] [--no-kube])" ;;
  esac
done

start="$(date +%s)"
version="$(tr -d '[:space:]' <"${REPO_ROOT}/VERSION")"
git_commit="$(git -C "${REPO_ROOT}" rev-parse HEAD 2>/dev/null || echo unknown)"
bins="${IMAGES_DIR}/bin"
mkdir -p "${bins}"

# peerdiscovery-apiserver exactly as the Dockerfile's build stage builds it
# (no VCS stamp: the Dockerfile copies no .git).
log::info "building peerdiscovery-apiserver ${version} (the Dockerfile's go build)"
(
  cd "${REPO_ROOT}"
  CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
    -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=${version} \
      -X k8s.io/component-base/version.gitCommit=${git_commit} \
      -X k8s.io/component-base/version.gitTreeState=clean" \
    -o "${bins}/peerdiscovery-apiserver" ./cmd/peerdiscovery-apiserver
)
log::info "building pause and the image builder"
(
  cd "${REPO_ROOT}/hack/images"
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "${bins}/pause" ./pause
  go build -o "${bins}/build-images" .
)

images=(
  "--image" "extension,${REGISTRY}/peerdiscovery-apiserver:${version},${bins}/peerdiscovery-apiserver"
  "--image" "pause,${REGISTRY}/pause:${PAUSE_TAG},${bins}/pause"
)
if ((kube)); then
  # shellcheck disable=SC2086 # a space-separated list
  for v in ${kube_versions}; do
    "${REPO_ROOT}/hack/build-kube-apiserver.sh" "${v}"
    images+=("--image" "kube,${REGISTRY}/kube-apiserver:${v},$(kube_apiserver_bin "${v}")")
  done
  "${REPO_ROOT}/hack/build-kube-controller-manager.sh" "${KUBE_NODE_VERSION}"
  # The scheduler only: the kubelet and kube-proxy run on the nodes, not
  # from an image (their builds are the node plane's).
  KUBE_NODE_COMPONENTS=kube-scheduler "${REPO_ROOT}/hack/build-kube-node.sh" "${KUBE_NODE_VERSION}"
  images+=(
    "--image" "kube,${REGISTRY}/kube-controller-manager:${KUBE_NODE_VERSION},$(kube_controller_manager_bin "${KUBE_NODE_VERSION}")"
    "--image" "kube,${REGISTRY}/kube-scheduler:${KUBE_NODE_VERSION},$(kube_scheduler_bin "${KUBE_NODE_VERSION}")"
  )
fi

"${bins}/build-images" --out "${IMAGES_DIR}" "${images[@]}"
log::info "images written to ${IMAGES_DIR} in $(elapsed_since "${start}")"
