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

# Installs what the end-to-end tests run besides the binaries built under
# _output, from Debian's packages: the Kubernetes Python client
# (python3-kubernetes), the client not written in Go that test/e2e drives
# through a server that does not serve the resource it lists; and
# iptables, with which the chaos soak (test/chaos) partitions two
# kube-apiservers. A no-op when both are there already.
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

missing=()
/usr/bin/python3 -c 'import kubernetes.dynamic' 2>/dev/null || missing+=(python3-kubernetes)
command -v iptables >/dev/null || missing+=(iptables)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
command -v apt-get >/dev/null || die "${missing[*]} missing and there is no apt-get: install the Kubernetes Python client for /usr/bin/python3 and iptables"
log::info "installing ${missing[*]} (Debian packages) for the end-to-end tests"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
/usr/bin/python3 -c 'import kubernetes.dynamic' || die "python3-kubernetes installed but 'import kubernetes.dynamic' fails"
command -v iptables >/dev/null || die "iptables installed but not on PATH"
