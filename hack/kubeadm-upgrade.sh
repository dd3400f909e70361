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

# hack/kubeadm-upgrade.sh (on demand, as root; about 20 minutes per routing, warm,
# on two cores): test/kubeadm with the upgrade. kubeadm makes a three-node HA
# control plane of v1.36.3 with the filter (init, join --control-plane),
# then upgrades it node by node to v1.37.2 (upgrade apply, upgrade node,
# the kubelet's upgrade and restart, docs/operations.md's commands) while
# the upgrade drill's workload runs through every kube-apiserver; it
# fails on any false 404, operation failed after retries, lost or
# duplicated write, unconverged informer or namespace left with objects.
# Then the same with upstream's kube-apiserver image (its built-in peer
# proxy), reported beside ours and not held to the bar (--only ROUTING
# runs one). Results:
# _output/kubeadm-upgrade/{drill-kubeadm.json,report-kubeadm.md,timeline-kubeadm.png}.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

[[ "$(id -u)" == "0" ]] || die "the kubeadm plane needs root (ip netns, unshare, mounts)"
hack/install-node-deps.sh --kubeadm
hack/build-kubectl.sh
hack/build-images.sh --no-kube
hack/build-kubeadm-images.sh v1.36.3 v1.37.2
# test/kubeadm removes its plane at the end; a test binary that panics or
# times out does not, and would leave three nodes running on this host.
remove_left_plane() {
  if [[ -e "${OUTPUT_DIR}/kubeadm/current" ]]; then
    log::warn "a kubeadm plane was left running: removing it"
    hack/kubeadm-plane.sh down || true
  fi
}
trap remove_left_plane EXIT
routings=(peerdiscovery upstream)
[[ "${1:-}" == --only ]] && routings=("${2:?--only peerdiscovery|upstream}")
rc=0
for r in "${routings[@]}"; do
  log::info "kubeadm upgrade under load: ${r}"
  PEERDISCOVERY_KUBEADM=upgrade PEERDISCOVERY_ROUTING="${r}" go test -count=1 -v -timeout 60m ./test/kubeadm || rc=1
  remove_left_plane
done
# The table (ours and upstream's) and the timeline.
(cd hack/drill-report && go run . --dir "${OUTPUT_DIR}/kubeadm-upgrade" --mode kubeadm) || rc=1
exit "${rc}"
