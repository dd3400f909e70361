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

# Builds crictl ${CRICTL_VERSION} (sigs.k8s.io/cri-tools, from the Go module
# proxy) into
#   _output/bin/crictl-${CRICTL_VERSION}/crictl
# for the kubeadm plane's nodes, where kubeadm's packages would install it.
# Skips the build if the binary already exists.
#
# Usage: hack/build-crictl.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/golang.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/golang.sh"

bin="$(crictl_bin)"
if [[ -x "${bin}" ]]; then
  log::info "crictl ${CRICTL_VERSION}: up to date (${bin})"
  exit 0
fi
start="$(date +%s)"
log::info "crictl ${CRICTL_VERSION}: building"
mkdir -p "$(dirname "${bin}")"
# With its own go.mod and go.sum, as `go install pkg@version` builds it.
GOBIN="$(dirname "${bin}")" CGO_ENABLED=0 go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
  "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}"
log::info "crictl ${CRICTL_VERSION}: built in $(($(date +%s) - start))s"
