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

# Builds the node components of a Kubernetes release, unmodified (nothing of
# this repository linked in), from the Go module proxy:
#   _output/bin/kubelet-VERSION/kubelet
#   _output/bin/kube-scheduler-VERSION/kube-scheduler
#   _output/bin/kube-proxy-VERSION/kube-proxy
#   _output/bin/kubeadm-VERSION/kubeadm (only when KUBE_NODE_COMPONENTS names it)
# stamped so that --version reports VERSION. The node-based local plane
# (hack/local-up.sh --nodes, internal/localcluster's nodes) runs them at the
# oldest release it runs, as on a node not upgraded yet.
#
# The wrapper modules (_output/build/<component>-VERSION) and the cache
# stamps work as for hack/build-kube-controller-manager.sh; see
# hack/lib/kube-release.sh. FORCE=1 rebuilds anyway; KUBE_GENERATE_ONLY=1
# only generates (and tidies) the wrapper modules.
#
# Usage: hack/build-kube-node.sh [VERSION...]   (default: ${KUBE_NODE_VERSION})
#   KUBE_NODE_COMPONENTS="kubelet" builds only those of the three;
#   KUBE_NODE_COMPONENTS="kubeadm" builds kubeadm, which only the kubeadm
#   plane needs.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/kube-release.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-release.sh"

main() {
  local -a versions
  mapfile -t versions < <(versions_or "${KUBE_NODE_VERSION}" "$@")
  local script="${REPO_ROOT}/hack/build-kube-node.sh" c
  for c in ${KUBE_NODE_COMPONENTS:-kubelet kube-scheduler kube-proxy}; do
    case "${c}" in
    kubelet) build_upstream_command kubelet kubelet kubelet_bin "${script}" "${versions[@]}" ;;
    kube-scheduler) build_upstream_command kube-scheduler kube-scheduler kube_scheduler_bin "${script}" "${versions[@]}" ;;
    kube-proxy) build_upstream_command kube-proxy kube-proxy kube_proxy_bin "${script}" "${versions[@]}" ;;
    kubeadm) build_upstream_command kubeadm kubeadm kubeadm_bin "${script}" "${versions[@]}" ;;
    *) die "unknown node component ${c} (kubelet, kube-scheduler, kube-proxy, kubeadm)" ;;
    esac
  done
}

main "$@"
