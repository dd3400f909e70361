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

# On demand (not in CI): what the filter costs at scale (test/bench), side
# by side in one run with direct requests and with upstream's built-in peer
# proxy (plain upstream kube-apiservers of the same releases): LIST of
# 10,000 objects, 1,000 watchers at 100 changes/s, closed-loop load at
# c=1..64 through v1.36.3, and each kube-apiserver's memory and CPU against
# the plain binary, idle and with CRDs across 5 servers. Both planes run at
# once and the measurements alternate between them. Writes
# _output/bench/<scale>/report.md, report.png, result.json and the heap
# profiles. The full scale took 26 minutes on two cores (warm
# binaries); --scale smoke about 5. Run it on a quiet machine, under the
# shared lock: flock /work/heavy.lock hack/bench.sh. --parts runs some of
# the parts and keeps the others from the last run at the same scale (one
# report from two shorter runs). --runs N (N > 1) runs the parts N times,
# each into _output/bench/<scale>/run-<k>/, then writes the median of the
# cost goals' figures over the runs to _output/bench/<scale>/median.md.
#
#   hack/bench.sh [--scale full|smoke] [--parts list,watch,load,cost] [--runs N]
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

scale=full
parts=list,watch,load,cost
runs=1
while [[ $# -gt 0 ]]; do
  case "$1" in
  --scale) scale="$2"; shift ;;
  --scale=*) scale="${1#*=}" ;;
  --parts) parts="$2"; shift ;;
  --parts=*) parts="${1#*=}" ;;
  --runs) runs="$2"; shift ;;
  --runs=*) runs="${1#*=}" ;;
  -h | --help) sed -n '16,32p' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
[[ "${scale}" == full || "${scale}" == smoke ]] || die "--scale ${scale}: want full or smoke"
[[ "${runs}" =~ ^[1-9][0-9]*$ ]] || die "--runs ${runs}: want a count"
[[ "$(id -u)" == "0" ]] || die "the bench needs root (ip netns add, unshare --uts)"

hack/build-etcd.sh
hack/build-kubectl.sh
hack/build-kube-apiserver.sh ${DEFAULT_KUBE_VERSIONS}
hack/build-kube-apiserver-upstream.sh ${DEFAULT_KUBE_VERSIONS}

# bench_run DIR runs the parts into DIR and reports them.
bench_run() {
  local dir="$1" rc
  mkdir -p "${dir}"
  [[ ",${parts}," != *,cost,* ]] || rm -f "${dir}"/heap-*.pb.gz
  log::info "bench (${scale}: ${parts}) into ${dir}"
  set +e
  PEERDISCOVERY_BENCH=1 PEERDISCOVERY_BENCH_SCALE="${scale}" PEERDISCOVERY_BENCH_PARTS="${parts}" \
    PEERDISCOVERY_BENCH_DIR="${dir}" PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
    go test -count=1 -v -timeout 90m -run '^TestBench$' ./test/bench 2>&1 | tee "${dir}/bench.log"
  rc=$? # pipefail: go test's status
  set -e
  if [[ -f "${dir}/result.json" ]]; then
    (cd hack/bench-report && go run . --dir "${dir}")
  fi
  return "${rc}"
}

base="${OUTPUT_DIR}/bench/${scale}"
if [[ "${runs}" == 1 ]]; then
  bench_run "${base}"
  exit
fi
rc=0
dirs=()
for k in $(seq "${runs}"); do
  rm -rf "${base}/run-${k}"
  bench_run "${base}/run-${k}" || rc=1
  dirs+=("${base}/run-${k}")
done
(IFS=,; cd hack/bench-report && go run . --median-of "${dirs[*]}") | tee "${base}/median.md"
exit "${rc}"
