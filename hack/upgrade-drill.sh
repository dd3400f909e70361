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

# On demand (not in CI): the upgrade drill. Three kube-apiservers v1.36.3
# (with --shutdown-delay-duration=10s) behind two peerdiscovery-apiserver
# replicas, with a kube-controller-manager v1.36.3 on the first, roll to
# v1.37.2 one at a time, one rolls back, and the server the others proxy
# the newer APIs to restarts, while about 75 operations per second (GET,
# LIST, WATCH, CREATE, UPDATE, DELETE on ConfigMaps, Deployments, a CRD
# and, once served, StorageVersionMigrations), short-lived namespaces and
# six informers keep using them. The same drill, workload and seed runs at
# the same time, in the same test invocation, on plain upstream
# kube-apiservers with the built-in peer proxy. Writes
# _output/upgrade-drill/report-full.md (both side by side) and
# timeline-full.png. About 10 minutes warm on two cores.
#
#   hack/upgrade-drill.sh [--short] [--only peerdiscovery|upstream]
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

mode=full
only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
  --short) mode=short ;;
  --only) only="$2"; shift ;;
  --only=*) only="${1#*=}" ;;
  -h | --help) sed -n '16,29p' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

[[ "$(id -u)" == "0" ]] || die "the drill needs root (ip netns add, unshare --uts)"
hack/build-etcd.sh
hack/build-kubectl.sh
hack/build-kube-apiserver.sh v1.36.3 v1.37.2
hack/build-kube-controller-manager.sh v1.36.3
[[ "${only}" == "peerdiscovery" ]] || hack/build-kube-apiserver-upstream.sh v1.36.3 v1.37.2

dir="${OUTPUT_DIR}/upgrade-drill"
mkdir -p "${dir}"
routing="${only:-both}"
log::info "upgrade drill (${mode}) on ${routing}"
# One invocation: every routing's plane side by side, the same plan and
# seed. Only this project's side is asserted; upstream's is reported.
rc=0
PEERDISCOVERY_E2E=1 PEERDISCOVERY_DRILL="${mode}" PEERDISCOVERY_ROUTING="${routing}" \
  PEERDISCOVERY_DRILL_DIR="${dir}" PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -count=1 -v -timeout 40m -run TestUpgradeDrill ./test/upgradedrill 2>&1 | tee "${dir}/drill-${mode}.log" || rc=$?
(cd hack/drill-report && go run . --dir "${dir}" --mode "${mode}")
exit "${rc}"
