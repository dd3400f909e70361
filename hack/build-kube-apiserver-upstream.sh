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

# Builds a plain upstream kube-apiserver of a Kubernetes release (upstream's
# own main, package k8s.io/kubernetes/cmd/kube-apiserver, without the
# peerdiscovery filter) from the Go module proxy, into
#   _output/bin/kube-apiserver-upstream-VERSION/kube-apiserver
# stamped so that --version reports VERSION. Its built-in peer proxy
# (feature gate UnknownVersionInteroperabilityProxy) is left as upstream ships
# it, so upstream's behaviour can be measured side by side with the filter's.
# Built on demand only: hack/build-all.sh does not build it.
#
# The wrapper module (_output/build/kube-apiserver-upstream-VERSION) and the
# cache stamp work as for hack/build-kube-apiserver.sh; see
# hack/lib/kube-release.sh. FORCE=1 rebuilds anyway; KUBE_GENERATE_ONLY=1
# only generates (and tidies) the wrapper module.
#
# Usage: hack/build-kube-apiserver-upstream.sh [VERSION...]   (default: ${DEFAULT_KUBE_VERSIONS}, the
# control plane test/controllers compares with)
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/kube-release.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-release.sh"

main() {
  local -a versions
  mapfile -t versions < <(versions_or "${DEFAULT_KUBE_VERSIONS}" "$@")
  build_upstream_command kube-apiserver-upstream kube-apiserver \
    kube_apiserver_upstream_bin "${REPO_ROOT}/hack/build-kube-apiserver-upstream.sh" \
    "${versions[@]}"
}

main "$@"
