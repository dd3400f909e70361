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

# Installs what the node-based plane (hack/local-up.sh --nodes, test/nodeplane)
# runs besides the binaries built under _output, from Debian's packages:
# containerd and runc (the container runtime), containernetworking-plugins
# (CNI bridge, host-local, loopback, portmap), iptables (kube-proxy) and
# openssl (hack/deploy-certs.sh). A no-op when they are there already.
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

needs=(containerd:containerd runc:runc ctr:containerd iptables-restore:iptables openssl:openssl nsenter:util-linux)
# --kubeadm: what the kubeadm plane needs besides (kubeadm's preflight
# wants conntrack; haproxy is its control-plane endpoint, socat its
# runtime API's client).
[[ "${1:-}" == --kubeadm ]] && needs+=(conntrack:conntrack haproxy:haproxy socat:socat)
missing=()
for need in "${needs[@]}"; do
  command -v "${need%%:*}" >/dev/null 2>&1 || missing+=("${need#*:}")
done
for plugin in bridge host-local loopback portmap; do
  [[ -x "/usr/lib/cni/${plugin}" ]] || missing+=(containernetworking-plugins)
done
((${#missing[@]} == 0)) && exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
command -v apt-get >/dev/null || die "missing ${missing[*]} and there is no apt-get: install containerd, runc, the CNI plugins (in /usr/lib/cni), iptables and openssl"
log::info "installing ${missing[*]} (Debian packages) for the node-based plane"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package may start a containerd of its own where an init system runs;
# the plane starts its own containerds and never uses that one.
