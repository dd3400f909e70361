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

# Builds a plain upstream kube-controller-manager of a Kubernetes release
# (package k8s.io/kubernetes/cmd/kube-controller-manager, nothing of this
# repository linked in) from the Go module proxy, into
#   _output/bin/kube-controller-manager-VERSION/kube-controller-manager
# stamped so that --version reports VERSION. The local control plane runs one
# kube-controller-manager of the oldest release, as the version skew policy
# wants during an upgrade.
#
# The wrapper module (_output/build/kube-controller-manager-VERSION) and the
# cache stamp work as for hack/build-kube-apiserver.sh; see
# hack/lib/kube-release.sh. FORCE=1 rebuilds anyway; KUBE_GENERATE_ONLY=1
# only generates (and tidies) the wrapper module.
#
# Usage: hack/build-kube-controller-manager.sh [VERSION...]   (default: ${KUBE_VERSIONS})
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/kube-release.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-release.sh"

main() {
  local -a versions
  mapfile -t versions < <(versions_or "${KUBE_VERSIONS}" "$@")
  build_upstream_command kube-controller-manager kube-controller-manager \
    kube_controller_manager_bin "${REPO_ROOT}/hack/build-kube-controller-manager.sh" \
    "${versions[@]}"
}

main "$@"
