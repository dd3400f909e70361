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

# Builds everything the local control plane and the tests run, cached under
# _output/ by version, in groups that hack/test.sh schedules separately:
#   plane       what every control plane runs: etcd, kube-apiserver (every
#               version in KUBE_VERSIONS, with the filter),
#               peerdiscovery-apiserver, kube-controller-manager
#               (KUBE_CONTROLLER_MANAGER_VERSION) and kubectl;
#   conformance upstream's e2e.test of the newest release (test/conformance,
#               hack/conformance.sh);
#   node        kubelet, kube-scheduler and kube-proxy (KUBE_NODE_VERSION),
#               for the node-based plane and its images.
# Default: all three. The plain upstream kube-apiserver
# (hack/build-kube-apiserver-upstream.sh) is built on demand only.
#
# Usage: hack/build-all.sh [plane|conformance|node]...
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

# Each build is a stage of hack/test.sh's table (lib/common.sh).
build_plane() {
  stage::build "etcd ${ETCD_VERSION}" "$(etcd_bin)" "${REPO_ROOT}/hack/build-etcd.sh"
  local v
  for v in ${KUBE_VERSIONS}; do
    stage::build "kube-apiserver ${v}" "$(kube_apiserver_bin "${v}")" "${REPO_ROOT}/hack/build-kube-apiserver.sh" "${v}"
  done
  # Right after the kube-apiservers: static (CGO_ENABLED=0) and -trimpath,
  # as internal/localcluster builds it and as the release builds above
  # are, so kube-apiserver's libraries, compiled once, serve it. Replaced
  # only when it changed, so the table can say "cached".
  stage::build "peerdiscovery-apiserver" "${BIN_DIR}/peerdiscovery-apiserver" build_extension
  # One kube-controller-manager, of the default control plane's oldest
  # release: it must not be newer than any kube-apiserver it talks to
  # during a rolling upgrade.
  stage::build "kube-controller-manager ${KUBE_CONTROLLER_MANAGER_VERSION}" "$(kube_controller_manager_bin "${KUBE_CONTROLLER_MANAGER_VERSION}")" \
    "${REPO_ROOT}/hack/build-kube-controller-manager.sh" "${KUBE_CONTROLLER_MANAGER_VERSION}"
  stage::build "kubectl ${KUBECTL_VERSION}" "$(kubectl_bin)" "${REPO_ROOT}/hack/build-kubectl.sh"
}

build_extension() {
  local bin="${BIN_DIR}/peerdiscovery-apiserver"
  (cd "${REPO_ROOT}" && CGO_ENABLED=0 go_compile build -trimpath -o "${bin}.tmp" ./cmd/peerdiscovery-apiserver)
  if cmp -s "${bin}.tmp" "${bin}"; then rm -f "${bin}.tmp"; else mv -f "${bin}.tmp" "${bin}"; fi
}

# Upstream's own tests, run through every server by test/conformance.
build_conformance() {
  local newest="${KUBE_VERSIONS##* }"
  stage::build "e2e.test ${newest}" "$(e2e_test_bin "${newest}")" "${REPO_ROOT}/hack/build-e2e-test.sh"
}

# The node components of the node-based plane (and kube-scheduler's image),
# and kubeadm (test/kubeadm renders the docs' configuration with it).
# NODE_COMPONENTS picks some (hack/test.sh: the scheduler for its image and
# kubeadm; the kubelet and kube-proxy serve only the on-demand planes).
build_node() {
  local c
  for c in ${NODE_COMPONENTS:-kubelet kube-scheduler kube-proxy kubeadm}; do
    KUBE_NODE_COMPONENTS="${c}" stage::build "${c} ${KUBE_NODE_VERSION}" "${BIN_DIR}/${c}-${KUBE_NODE_VERSION}/${c}" \
      "${REPO_ROOT}/hack/build-kube-node.sh" "${KUBE_NODE_VERSION}"
  done
}

(($# > 0)) || set -- plane conformance node
for group in "$@"; do
  case "${group}" in
  plane | conformance | node) "build_${group}" ;;
  *) die "unknown group ${group} (usage: hack/build-all.sh [plane|conformance|node]...)" ;;
  esac
done
