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

# Starts a real local mixed-version control plane and keeps it up until
# Ctrl-C (or SIGTERM), then stops everything it started:
#   - etcd ${ETCD_VERSION}, one kube-apiserver per --servers version (default
#     ${DEFAULT_KUBE_VERSIONS}) with the peerdiscovery filter linked in, and
#     peerdiscovery-apiserver replicas registered through a real APIService,
#   - all inside a sealed network namespace pd-<rand> (10.254.77.0/24 by
#     default; nothing routes out), reachable from the host through a veth,
#   - a kubeconfig with one context per kube-apiserver, named after its
#     version, at _output/local-up/kubeconfig.
# Needs root (ip netns, unshare). Logs: _output/local-up/<run>/logs/.
#
# First builds what is missing or stale, and only what this plane starts
# (hack/build-*.sh skip up-to-date binaries; a cold kube-apiserver build
# takes ~9 min per version; cmd/local-up builds the kube-controller-manager
# unless --no-controller-manager), then runs cmd/local-up. Every argument is passed to it; see `--help`, e.g.
#   hack/local-up.sh --servers v1.36.3,v1.37.2 --extension-replicas 2 --tombstone-period 60s
#
# With --nodes, the same plane runs the way kubeadm clusters run: one node
# per kube-apiserver (containerd, runc, CNI and a kubelet of the oldest
# release), the kube-apiservers as static pods from the images of
# hack/build-images.sh, and peerdiscovery-apiserver installed with
# `kubectl apply -k` of artifacts/deploy/overlays/ha (see
# internal/localcluster's NodesSpec); it also installs the Debian packages
# it needs with apt-get.
#
# With --kubeadm, kubeadm makes the plane instead, as admins do: three
# control-plane nodes (kubeadm init, kubeadm join --control-plane, stacked
# etcd, haproxy in front) with the filter build of v1.36.3, and
# peerdiscovery-apiserver installed the same way; see
# hack/kubeadm-plane.sh. It stays up until Ctrl-C, then is removed; the
# kubeconfig is _output/kubeadm/current/kubeconfig. No other flag applies.
#
# cmd/local-up is built and exec'd rather than `go run`: `go run` neither
# forwards SIGINT/SIGTERM to the program nor exits with it, so a `kill -INT`
# sent to this script would leave the cluster running.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"

# --output-dir also decides where the binaries go; find it (and --servers)
# before sourcing common.sh, which reads PEERDISCOVERY_OUTPUT_DIR.
servers=""
nodes=0
kubeadm=0
output_dir_arg=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
  --output-dir=*) output_dir_arg="${args[i]#*=}" ;;
  --output-dir) output_dir_arg="${args[i + 1]:-}" ;;
  --servers=*) servers="${args[i]#*=}" ;;
  --servers) servers="${args[i + 1]:-}" ;;
  --nodes) nodes=1 ;;
  --kubeadm) kubeadm=1 ;;
  -h | --help)
    cd "${HACK_DIR}/.." && exec go run ./cmd/local-up --help
    ;;
  esac
done
if [[ -n "${output_dir_arg}" ]]; then
  PEERDISCOVERY_OUTPUT_DIR="$(realpath -m "${output_dir_arg}")"
  export PEERDISCOVERY_OUTPUT_DIR
fi

# shellcheck source=hack/lib/golang.sh
source "${HACK_DIR}/lib/golang.sh"

[[ "$(id -u)" == "0" ]] || die "local-up needs root (ip netns add, unshare --uts)"
require_cmd ip unshare go

if ((kubeadm)); then
  "${HACK_DIR}/install-node-deps.sh" --kubeadm
  "${HACK_DIR}/build-kubectl.sh"
  "${HACK_DIR}/build-images.sh" --no-kube
  # Both releases, so that hack/kubeadm-plane.sh upgrade-node can upgrade
  # this plane (up imports every image built).
  "${HACK_DIR}/build-kubeadm-images.sh"
  "${HACK_DIR}/kubeadm-plane.sh" up
  trap '"${HACK_DIR}/kubeadm-plane.sh" down' EXIT
  log::info "kubeadm plane up; Ctrl-C removes it. kubectl: export KUBECONFIG=${OUTPUT_DIR}/kubeadm/current/kubeconfig PATH=$(dirname "$(kubectl_bin)"):\${PATH}"
  # Until Ctrl-C or SIGTERM; the EXIT trap removes the plane.
  sleep infinity &
  sleeper=$!
  trap 'kill "${sleeper}" 2>/dev/null; exit 0' INT TERM
  wait "${sleeper}"
  exit 0
fi

versions=()
if [[ -n "${servers}" ]]; then
  IFS=',' read -r -a versions <<<"${servers}"
else
  # The releases the plane starts by default (cmd/local-up --servers).
  read -r -a versions <<<"${DEFAULT_KUBE_VERSIONS}"
fi
# Distinct versions only.
mapfile -t versions < <(printf '%s\n' "${versions[@]}" | sed 's/[[:space:]]//g;/^$/d' | awk '!seen[$0]++')

"${HACK_DIR}/build-etcd.sh"
"${HACK_DIR}/build-kubectl.sh"
"${HACK_DIR}/build-kube-apiserver.sh" "${versions[@]}"
if ((nodes)); then
  # containerd, runc, the CNI plugins, iptables (apt-get when missing) and
  # the node binaries; local-up then runs hack/build-images.sh, which
  # repacks only the images whose inputs changed.
  "${HACK_DIR}/install-node-deps.sh"
  "${HACK_DIR}/build-kube-node.sh"
fi

# local-up itself (re)builds peerdiscovery-apiserver (go build, incremental).
log::info "building local-up and the kubectl plugin"
(cd "${REPO_ROOT}" && go build -o "${BIN_DIR}/local-up" ./cmd/local-up &&
  go build -o "${BIN_DIR}/kubectl-plugins/kubectl-peerdiscovery" ./cmd/kubectl-peerdiscovery)

exec "${BIN_DIR}/local-up" --output-dir "${OUTPUT_DIR}" "$@"
