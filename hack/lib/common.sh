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

# Shared settings and helpers for the hack/ scripts. Source it, don't run it:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
#
# Everything built lands under ${OUTPUT_DIR} (default: <repo>/_output, which
# is git-ignored), keyed by version, so a second run reuses the binaries:
#
#   _output/bin/etcd-v3.7.3/etcd
#   _output/bin/kubectl-v1.37.2/kubectl
#   _output/bin/kube-apiserver-v1.37.2/kube-apiserver (+ .stamp)
#   _output/bin/kube-apiserver-upstream-v1.37.2/kube-apiserver (+ .stamp)
#   _output/bin/kube-controller-manager-v1.36.3/kube-controller-manager (+ .stamp)
#   _output/bin/kubelet-v1.36.3/kubelet, kube-scheduler-v1.36.3/kube-scheduler,
#     kube-proxy-v1.36.3/kube-proxy (+ .stamp)   the node-based plane
#   _output/bin/prometheus-v3.16.0/{promtool,prometheus} (+ .stamp)
#   _output/images/*.tar                OCI image archives (hack/build-images.sh)
#   _output/build/<name>-<version>/   generated wrapper Go modules
#   _output/tmp/                      scratch space for smoke tests
#
# PEERDISCOVERY_OUTPUT_DIR overrides the output folder (e.g. to share the
# binaries between several clones on one machine).

if [[ -n "${PEERDISCOVERY_COMMON_SOURCED:-}" ]]; then
  return 0
fi
PEERDISCOVERY_COMMON_SOURCED=1

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
OUTPUT_DIR="${PEERDISCOVERY_OUTPUT_DIR:-${REPO_ROOT}/_output}"
BIN_DIR="${OUTPUT_DIR}/bin"
BUILD_DIR="${OUTPUT_DIR}/build"
TMP_DIR="${OUTPUT_DIR}/tmp"

# The module path of this repository (the filter's module).
MAIN_MODULE="sigs.k8s.io/peerdiscovery"

# Versions of the real binaries the end-to-end tests run.
ETCD_VERSION="v3.7.3"
# Space-separated; the oldest first. The default control plane (local-up,
# test/e2e, test/controllers) runs DEFAULT_KUBE_VERSIONS; v1.35.4 runs in
# test/e2e135 only, on demand. KUBE_VERSIONS from the environment wins
# (hack/test.sh sets it to DEFAULT_KUBE_VERSIONS).
DEFAULT_KUBE_VERSIONS="v1.36.3 v1.37.2"
KUBE_VERSIONS="${KUBE_VERSIONS:-v1.35.4 ${DEFAULT_KUBE_VERSIONS}}"
# The kube-controller-manager test/controllers and local-up run: the oldest
# release of the default control plane.
KUBE_CONTROLLER_MANAGER_VERSION="${DEFAULT_KUBE_VERSIONS%% *}"
# The node components of the node-based plane (hack/local-up.sh --nodes):
# kubelet, kube-scheduler and kube-proxy of the oldest release it runs, as
# on a node not upgraded yet.
KUBE_NODE_VERSION="${DEFAULT_KUBE_VERSIONS%% *}"
KUBECTL_VERSION="v1.37.2"
# crictl (cri-tools; kubeadm's packages depend on it): the kubeadm plane's
# runbook waits with it for static Pods to stop.
CRICTL_VERSION="v1.37.0"
# dlv traces a request through the filter (hack/request-walk.sh, on demand).
DLV_VERSION="v1.27.2"
# Prometheus (promtool checks artifacts/monitoring/ in the test command; the
# server runs in test/alerts on demand). Prometheus 3.Y.Z is published to the
# Go module proxy as github.com/prometheus/prometheus v0.(300+Y).Z.
PROMETHEUS_VERSION="v3.16.0"
# Its build tags (hack/build-prometheus.sh): only the Kubernetes service
# discovery of the optional ones. hack/monitoring's tests use the same, so
# they share promtool's compiled packages.
PROMETHEUS_BUILD_TAGS="netgo,remove_all_sd,enable_kubernetes_sd"

export REPO_ROOT OUTPUT_DIR BIN_DIR BUILD_DIR TMP_DIR MAIN_MODULE
export ETCD_VERSION DEFAULT_KUBE_VERSIONS KUBE_VERSIONS KUBE_CONTROLLER_MANAGER_VERSION KUBE_NODE_VERSION KUBECTL_VERSION
export CRICTL_VERSION
export PROMETHEUS_VERSION PROMETHEUS_BUILD_TAGS

# Lean compiles, for every go command of every script: no DWARF (compiled,
# then linked, only for debuggers; stack traces, the race detector's
# reports and pprof use the symbol tables Go keeps anyway), as upstream's
# release builds (-s -w). One flag set for all of them, since it is part of
# each compile's cache key: the race detector's compile of the libraries
# serves go vet, the unit tests and the end-to-end packages, the static one
# every release build and static test. An -ldflags given on a command line
# replaces GOFLAGS' -ldflags=-w: version_ldflags carries -s -w itself.
case " ${GOFLAGS:-} " in
*" -gcflags="*) ;;
*) export GOFLAGS="${GOFLAGS:+${GOFLAGS} }-gcflags=all=-dwarf=false -ldflags=-w" ;;
esac
# go_compile runs a go command that only compiles (builds, go vet, test
# binaries compiled and not run) with the compiler's garbage collector at
# GOGC=400: 24 GiB leave room for it, and a cold run is CPU-bound. Never for
# a command that runs tests: they would inherit it.
go_compile() { GOGC="${PEERDISCOVERY_COMPILE_GOGC:-400}" go "$@"; }

# Paths of the built binaries.
etcd_bin() { echo "${BIN_DIR}/etcd-${ETCD_VERSION}/etcd"; }
kubectl_bin() { echo "${BIN_DIR}/kubectl-${KUBECTL_VERSION}/kubectl"; }
kube_apiserver_bin() { echo "${BIN_DIR}/kube-apiserver-${1:?version}/kube-apiserver"; }
# Plain upstream binaries of a release, without the filter.
kube_apiserver_upstream_bin() { echo "${BIN_DIR}/kube-apiserver-upstream-${1:?version}/kube-apiserver"; }
kube_controller_manager_bin() { echo "${BIN_DIR}/kube-controller-manager-${1:?version}/kube-controller-manager"; }
kubelet_bin() { echo "${BIN_DIR}/kubelet-${1:?version}/kubelet"; }
kube_scheduler_bin() { echo "${BIN_DIR}/kube-scheduler-${1:?version}/kube-scheduler"; }
kube_proxy_bin() { echo "${BIN_DIR}/kube-proxy-${1:?version}/kube-proxy"; }
kubeadm_bin() { echo "${BIN_DIR}/kubeadm-${1:?version}/kubeadm"; }
# crictl of CRICTL_VERSION, whatever the release (hack/build-crictl.sh).
crictl_bin() { echo "${BIN_DIR}/crictl-${CRICTL_VERSION}/crictl"; }
# Upstream's e2e test binary of a release (hack/build-e2e-test.sh).
e2e_test_bin() { echo "${BIN_DIR}/e2e-test-${1:?version}/e2e.test"; }
# promtool or prometheus of PROMETHEUS_VERSION (hack/build-prometheus.sh).
prometheus_bin() { echo "${BIN_DIR}/prometheus-${PROMETHEUS_VERSION}/${1:?promtool or prometheus}"; }

# Logging: everything goes to stderr so stdout stays usable for results.
log::_ts() { date -u +'%H:%M:%S'; }
log::info() { echo "[$(log::_ts)] ${*}" >&2; }
log::warn() { echo "[$(log::_ts)] WARNING: ${*}" >&2; }
log::error() { echo "[$(log::_ts)] ERROR: ${*}" >&2; }
die() {
  log::error "${@}"
  exit 1
}

# require_cmd NAME... fails unless every command is on PATH.
require_cmd() {
  local c
  for c in "$@"; do
    command -v "${c}" >/dev/null 2>&1 || die "required command not found: ${c}"
  done
}

# versions_or DEFAULT [VERSION...] prints the VERSIONs given, else the
# space-separated DEFAULT, one per line: a script's version arguments
# (mapfile -t versions < <(versions_or "${KUBE_VERSIONS}" "$@")).
versions_or() {
  local default="${1}"
  shift
  if (($# > 0)); then
    printf '%s\n' "$@"
  else
    # shellcheck disable=SC2086 # DEFAULT is a space-separated list
    printf '%s\n' ${default}
  fi
}

# is_known_kube_version VERSION succeeds if VERSION is one of KUBE_VERSIONS.
is_known_kube_version() {
  local v
  for v in ${KUBE_VERSIONS}; do
    [[ "${v}" == "${1}" ]] && return 0
  done
  return 1
}

# semver_parts VERSION sets the globals MAJOR, MINOR, PATCH from vX.Y.Z.
# shellcheck disable=SC2034 # read by the callers
semver_parts() {
  local v="${1#v}"
  if [[ ! "${v}" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
    die "not a release version (vX.Y.Z): ${1}"
  fi
  MAJOR="${BASH_REMATCH[1]}"
  MINOR="${BASH_REMATCH[2]}"
  PATCH="${BASH_REMATCH[3]}"
}

# with_lock FILE CMD... runs CMD holding an exclusive flock on FILE, so two
# scripts (or two test processes) building the same binary don't race.
with_lock() {
  local lock="${1}"
  shift
  mkdir -p "$(dirname "${lock}")"
  (
    flock 9
    "$@"
  ) 9>"${lock}"
}

# elapsed_since START_SECONDS prints "Ns".
elapsed_since() { echo "$(($(date +%s) - ${1}))s"; }

# Stages: hack/test.sh reports each stage of a run (seconds, and whether a
# build was cached or built) in a table at the end. A stage appends one
# tab-separated line (name, seconds, note) to ${PEERDISCOVERY_STAGE_FILE}
# when it is set; scripts run by a stage (hack/build-all.sh) add their own.
#
# stage::run NAME CMD... runs CMD and records it; the note is what CMD
# leaves in STAGE_NOTE (a shell function can set it), else "ran".
stage::run() {
  local name="${1}" start cpu own used rc=0
  shift
  STAGE_NOTE=""
  start="$(date +%s)"
  cpu="$(stage::cpu_jiffies)"
  stage::children_cpu own
  log::info "=== ${name}"
  "$@" || rc=$?
  stage::children_cpu used
  stage::record "${name}" "$(($(date +%s) - start))" "${STAGE_NOTE:-ran}$( ((rc == 0)) || echo ", failed (rc ${rc})")" "$(stage::cores_busy "${cpu}")" "$((used - own))"
  return "${rc}"
}

# stage::build NAME BINARY CMD... runs a build command as a stage: "built"
# when BINARY changed, "cached" when the script found it up to date.
stage::build() {
  local name="${1}" bin="${2}" before after start cpu own used rc=0
  shift 2
  before="$(stat -c %Y.%i "${bin}" 2>/dev/null || true)"
  start="$(date +%s)"
  cpu="$(stage::cpu_jiffies)"
  stage::children_cpu own
  "$@" || rc=$?
  stage::children_cpu used
  after="$(stat -c %Y.%i "${bin}" 2>/dev/null || true)"
  local note="built"
  [[ -n "${before}" && "${before}" == "${after}" ]] && note="cached"
  ((rc == 0)) || note="failed (rc ${rc})"
  stage::record "build ${name}" "$(($(date +%s) - start))" "${note}" "$(stage::cores_busy "${cpu}")" "$((used - own))"
  return "${rc}"
}

# stage::record NAME SECONDS NOTE [CORES [CPU]] appends one row.
stage::record() {
  [[ -n "${PEERDISCOVERY_STAGE_FILE:-}" ]] || return 0
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:--}" "${5:--}" >>"${PEERDISCOVERY_STAGE_FILE}"
}

# stage::children_cpu VAR sets VAR to the CPU seconds (user and system) of
# this shell's finished children so far (bash's times, second line; run in
# this shell, not in a $(...) subshell, whose children are its own).
# Beside cores busy, which counts the whole machine, this says which stage
# costs the CPU when stages run side by side: on a CPU-bound cold run, the
# time saved is the CPU saved divided by the cores.
stage::children_cpu() {
  local f
  f="$(mktemp)"
  times >"${f}"
  printf -v "${1}" '%s' "$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); n += a[1] * 60 + a[2] }; printf "%.0f", n }' "${f}")"
  rm -f "${f}"
}

# stage::cpu_jiffies prints the machine's busy and total CPU time so far
# (/proc/stat, all cores); stage::cores_busy BEFORE prints how many cores
# were busy on average since then (the whole machine, stages beside it
# included): where a stage leaves cores idle, CI's time has room.
stage::cpu_jiffies() {
  awk '/^cpu / { total = 0; for (i = 2; i <= NF; i++) total += $i; print total - $5 - $6, total; exit }' /proc/stat
}
stage::cores_busy() {
  # shellcheck disable=SC2206 # two numbers
  local before=(${1}) now
  # shellcheck disable=SC2207
  now=($(stage::cpu_jiffies))
  awk -v b="$((now[0] - before[0]))" -v t="$((now[1] - before[1]))" -v n="$(nproc)" \
    'BEGIN { if (t > 0) printf "%.1f of %d", n * b / t, n; else print "-" }'
}

# stage::table prints the recorded stages and their total.
stage::table() {
  [[ -s "${PEERDISCOVERY_STAGE_FILE:-}" ]] || return 0
  awk -F'\t' '
    { rows[NR] = $0; if (length($1) > w) w = length($1) }
    END {
      printf "%-*s %8s  %-12s %6s  %s\n", w, "stage", "seconds", "cores busy", "CPU s", "cached or built"
      for (i = 1; i <= NR; i++) { split(rows[i], f, "\t"); printf "%-*s %8d  %-12s %6s  %s\n", w, f[1], f[2], (f[4] == "" ? "-" : f[4]), (f[5] == "" ? "-" : f[5]), f[3] }
    }' "${PEERDISCOVERY_STAGE_FILE}"
}

# stage::budget KIND SECONDS FILE prints the run's total against its budget
# (FILE's "total" row for KIND, cold or warm), and every row of the stage
# table that took more than its share there by over a fifth and 30 s: which
# stage grew. It reports; it does not fail the run (machines differ by a
# quarter on the same code).
stage::budget() {
  local kind="${1}" total="${2}" file="${3}"
  [[ -s "${PEERDISCOVERY_STAGE_FILE:-}" && -s "${file}" ]] || return 0
  awk -F'\t' -v kind="${kind}" -v total="${total}" '
    FNR == NR {
      if ($0 ~ /^#/ || NF < 3) next
      share[$1] = (kind == "cold" ? $2 : $3)
      next
    }
    { seconds[$1] = $2; order[++n] = $1 }
    END {
      budget = share["total"]
      printf "%s run: %d s (%.1f min) against a budget of %d s (%.0f min): %s\n", kind, total, total / 60, budget, budget / 60,
        (total <= budget ? "within" : "OVER by " total - budget " s")
      for (i = 1; i <= n; i++) {
        # A package row ("  ok test/e2e") by its package.
        name = order[i]; key = name; sub(/^[[:space:]]+(ok|FAIL)[[:space:]]+/, "", key)
        if (!(key in share)) continue
        if (seconds[name] > share[key] * 1.2 && seconds[name] > share[key] + 30)
          printf "  %s took %d s, over its share of %d s (hack/ci-budget.tsv): this stage grew\n", key, seconds[name], share[key]
      }
    }' "${file}" "${PEERDISCOVERY_STAGE_FILE}"
}

