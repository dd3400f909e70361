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

# The seeded chaos soak (test/chaos). A local plane of three
# kube-apiservers (v1.36.3 x2 with policy/v1 off, v1.37.2), two
# peerdiscovery-apiserver replicas and the kube-controller-manager runs a
# bounded workload (reads, writes, watches and informers on ConfigMaps,
# Deployments, a CRD, StorageVersionMigrations and PodDisruptionBudgets,
# namespaces created and deleted) while faults drawn from the seed hit it:
# SIGKILL, SIGTERM, SIGSTOP of any kube-apiserver, a crash of one or of
# every extension replica, a partition between two kube-apiservers, a
# CPU-starved kube-apiserver. With --routing both (the default) the same
# seed runs at the same time on plain upstream kube-apiservers with the
# built-in peer proxy, in the same invocation. Every violation of an
# invariant is printed with the seed and a timeline; the table (report.md),
# the results (results.json) and the timeline (timeline.png) go to
# _output/chaos/seed-<N>/. Exits non-zero when this project's side broke
# an invariant.
#
#   hack/chaos.sh [--seed N[,N...]] [--duration D] [--routing peerdiscovery|upstream|both] [--plan]
#
#   --seed N       the schedule's seed (default 4923, the test command's); several
#                  (--seed 1,2,3) run one after the other, unattended, and
#                  _output/chaos/summary-1,2,3.md counts every violation by
#                  invariant, seed and routing
#   --duration D   time for the fault episodes, e.g. 150s, 30m (default 150s);
#                  start-up, warmup, tail and the final checks add ~3-5 min
#   --routing R    peerdiscovery, upstream or both (default both)
#   --plan         print the seed's episodes and exit
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

seed=4923
duration=150s
routing=both
plan=""
while [[ $# -gt 0 ]]; do
  case "$1" in
  --seed) seed="$2"; shift ;;
  --seed=*) seed="${1#*=}" ;;
  --duration) duration="$2"; shift ;;
  --duration=*) duration="${1#*=}" ;;
  --routing) routing="$2"; shift ;;
  --routing=*) routing="${1#*=}" ;;
  --plan) plan=1 ;;
  -h | --help) sed -n '16,38p' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
[[ "${seed}" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--seed wants non-negative integers separated by commas, got ${seed}"
case "${routing}" in
peerdiscovery | upstream | both) ;;
*) die "--routing wants peerdiscovery, upstream or both, got ${routing}" ;;
esac
IFS=, read -r -a seeds <<<"${seed}"
export PEERDISCOVERY_CHAOS_DURATION="${duration}"

if [[ -n "${plan}" ]]; then
  for s in "${seeds[@]}"; do
    PEERDISCOVERY_CHAOS_PLAN=1 PEERDISCOVERY_CHAOS_SEED="${s}" go test -count=1 -v -run '^TestPrintSchedule$' ./test/chaos | grep -E 'episode|FAIL|want'
  done
  exit 0
fi

[[ "$(id -u)" == "0" ]] || die "the soak needs root (ip netns add, unshare --uts, iptables, cgroups)"
hack/install-test-deps.sh
hack/build-etcd.sh
hack/build-kubectl.sh
hack/build-kube-apiserver.sh v1.36.3 v1.37.2
hack/build-kube-controller-manager.sh v1.36.3
[[ "${routing}" == "peerdiscovery" ]] || hack/build-kube-apiserver-upstream.sh v1.36.3 v1.37.2

# The test's own bound: twice the episodes' time plus start-up and checks.
case "${duration}" in
*h) secs=$(( ${duration%h} * 3600 )) ;;
*m) secs=$(( ${duration%m} * 60 )) ;;
*s) secs=$(( ${duration%s} )) ;;
*) die "--duration wants whole seconds, minutes or hours (150s, 30m, 1h), got ${duration}" ;;
esac
timeout_min=$(( secs * 2 / 60 + 45 ))
rc=0
dirs=()
for s in "${seeds[@]}"; do
  dir="${OUTPUT_DIR}/chaos/seed-${s}"
  mkdir -p "${dir}"
  rm -f "${dir}/results.json"
  log::info "chaos soak: seed ${s}, ${duration}, routing ${routing} (log: ${dir}/soak.log)"
  PEERDISCOVERY_E2E=1 PEERDISCOVERY_ROUTING="${routing}" PEERDISCOVERY_CHAOS_DIR="${dir}" \
    PEERDISCOVERY_CHAOS_SEED="${s}" PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
    go test -count=1 -v -timeout "${timeout_min}m" -run '^TestChaos$' ./test/chaos >"${dir}/soak.log" 2>&1 || rc=1
  grep -E 'VIOLATION|--- (PASS|FAIL)|^(ok|FAIL)|violations of' "${dir}/soak.log" || true
  if [[ -f "${dir}/results.json" ]]; then
    (cd hack/drill-report && go run . --chaos "${dir}")
    dirs+=("${dir}")
  else
    log::error "no results: see ${dir}/soak.log"
  fi
done
if [[ ${#seeds[@]} -gt 1 && ${#dirs[@]} -gt 0 ]]; then
  (cd hack/drill-report && go run . --chaos-summary "${OUTPUT_DIR}/chaos/summary-${seed}.md" "${dirs[@]}")
fi
exit "${rc}"
