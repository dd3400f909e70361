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

# Runs every test: static checks, generated-code check, unit and
# integration tests with the race detector, and the end-to-end suites on a
# real local mixed-version control plane. This is the README's
# test command and what .ci/run calls. Binaries are cached under _output/.
#
# Its shape (docs/testing.md, "CI's time"): the quick static checks; the
# binaries the end-to-end packages run; then, side by side, three end-to-end
# lanes and two tracks of everything else: one of kube-scheduler, kubeadm
# and the images, go vet, generated code, the unit tests; one of the
# monitoring checks, whose compile of Prometheus' parsers shares nothing
# with the other. The tracks are CPU-bound and run niced, so they take the
# cores the lanes leave and give them back when a lane needs them. A cold
# run is CPU-bound from end to end: the stage table's CPU column says which
# stage costs what, and the time saved is the CPU saved over the cores. At
# the end: the stage table, and the budget (hack/ci-budget.tsv): 45
# minutes cold, 15 warm.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

# Not "start": stage::run has a local of that name, and a stage that fails
# exits through the EXIT trap below inside its scope.
test_start=$(date +%s)
export PEERDISCOVERY_STAGE_FILE="${OUTPUT_DIR}/test-stages.tsv"
mkdir -p "${OUTPUT_DIR}"
: >"${PEERDISCOVERY_STAGE_FILE}"
rm -f "${OUTPUT_DIR}/test-failures.txt"
# Cold: no kube-apiserver built yet (every binary is cached under
# _output/bin, so their absence means an empty cache).
run_kind=warm
compgen -G "${BIN_DIR}/kube-apiserver-v*/kube-apiserver" >/dev/null || run_kind=cold
report() {
  local rc=$? cpu
  echo
  stage::table
  stage::budget "${run_kind}" "$(($(date +%s) - test_start))" "${REPO_ROOT}/hack/ci-budget.tsv"
  stage::children_cpu cpu
  log::info "CPU: ${cpu} s of user and system time in the processes this run waited for ($(nproc) cores)"
  # Last, so that a log's tail shows why: the lines before each failed
  # package's FAIL (a TestMain's error too, which no test line names).
  if [[ "${rc}" -ne 0 && -s "${OUTPUT_DIR}/test-failures.txt" ]]; then
    log::info "why it failed (${OUTPUT_DIR}/test-failures.txt):"
    head -120 "${OUTPUT_DIR}/test-failures.txt"
  fi
  log::info "hack/test.sh: rc ${rc} in $(($(date +%s) - test_start))s (${run_kind})"
}
trap report EXIT

# CI builds and tests the supported releases, DEFAULT_KUBE_VERSIONS
# (v1.36.3, v1.37.2). kube-apiserver v1.35.4 and test/e2e135, the upgrade
# from it, run on demand (docs/testing.md), and so does the filter's
# compile against v1.35's libraries (hack/verify.sh filter-builds).
export KUBE_VERSIONS="${DEFAULT_KUBE_VERSIONS}"

# The track marks its failure here.
READY_DIR="${OUTPUT_DIR}/test-ready"
rm -rf "${READY_DIR}"
mkdir -p "${READY_DIR}"

# 1. Seconds: gofmt, license headers.
hack/verify.sh quick

# 2. What every control plane runs (one stage per binary, cached or built),
# and the packages the tests install. Upstream's e2e.test and
# test/conformance, which runs it through every server, are on demand: the
# cold budget (docs/testing.md, "CI's time").
hack/build-all.sh plane
stage::run "test dependencies (the Kubernetes Python client)" hack/install-test-deps.sh
stage::run "node dependencies (containerd, runc, CNI plugins, iptables)" hack/install-node-deps.sh

# 3. The end-to-end packages, compiled once before the lanes start (each
# lane's go test would otherwise compile the same dependencies at the same
# time). They start real binaries from _output/bin, which go test does not
# count among a package's inputs: -count=1 so that no result is ever served
# from the test cache. -race: the harness (the workload, the monitors, the
# planes) runs under the race detector too; this compile of the dependencies
# is the one go vet and the unit tests reuse.
# The packages whose planes start in seconds run after test/controllers,
# the others' lane (the e2e lane's test/e2e is the longest package).
small_planes=(./test/planetest ./test/integration ./test/egress)
lane_packages=(./test/e2e ./test/controllers "${small_planes[@]}" ./test/upgradedrill ./test/chaos)
# The packages that run on demand only (docs/testing.md) start no plane
# here; their control-plane-free tests run with the unit tests. The node
# plane is among them: the cold budget (test/kubeadm's plane, on demand
# too, runs the same images under real kubelets, made by kubeadm), and so is
# test/conformance.
on_demand=(./test/conformance ./test/e2e135 ./test/alerts ./test/bench ./test/crdchurn ./test/relist ./test/kubeadm ./test/nodeplane)
# test/scale runs on demand too (hack/test-scale.sh); under the race
# detector it skips, so go vet -race ./... still vets it.
others="$(printf '%s|' "${lane_packages[@]#./}" "${on_demand[@]#./}" test/scale)"
mapfile -t rest_packages < <(go list -race ./test/... | grep -v -E "^${MAIN_MODULE}/(${others%|})(/|\$)")
# The chaos soak measures its clients' latency against upstream's figures,
# measured without the race detector (hack/chaos.sh); under it, the
# harness's own decoding of each list answer took up to ten times the
# request (test/chaos, CIClientBounds). So the soak runs without it; the
# harness code it shares (test/workload, test/planetest) runs under it in
# the other lanes.
timed_packages=(./test/chaos)
# Static (CGO_ENABLED=0, -trimpath) as the release builds, whose compile of
# the libraries it then reuses: a default build would compile all of them a
# third time (after the race detector's and the static one).
go_test_timed() { CGO_ENABLED=0 go test -trimpath -vet=off -count=1 "$@"; }
# -vet=off on every go test here: the track's go vet -race ./... vets the
# same packages with every analyzer, and go test's own vet, with other
# flags, would analyse each of the ~1,200 dependencies once more for its
# facts (its cache key holds the flags): a few hundred CPU seconds cold.
compile_e2e() {
  # Without PEERDISCOVERY_E2E each TestMain starts no plane; -run '^$'
  # runs no test.
  { go_compile test -race -vet=off -count=1 -run '^$' "${lane_packages[@]}" "${rest_packages[@]}" &&
    go_test_timed -run '^$' "${timed_packages[@]}"; } >"${OUTPUT_DIR}/e2e-compile.log" 2>&1 ||
    { tail -50 "${OUTPUT_DIR}/e2e-compile.log"; return 1; }
}
stage::run "compile the end-to-end packages (race detector)" compile_e2e

e2e() {
  PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" go test -count=1 -race -vet=off -p 1 -timeout 60m "$@"
}
e2e_timed() {
  PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" go_test_timed -p 1 -timeout 60m "$@"
}

# The lanes, balanced by their packages' measured seconds (docs/testing.md):
# each is a stage, with one row per package under it.
lane_e2e() { e2e ./test/e2e "${rest_packages[@]}"; }
lane_controllers() {
  local rc=0
  e2e ./test/controllers || rc=$?
  e2e "${small_planes[@]}" || rc=$?
  return "${rc}"
}
lane_faults() {
  local rc=0
  e2e ./test/upgradedrill || rc=$?
  e2e_timed "${timed_packages[@]}" || rc=$?
  return "${rc}"
}
lanes=(e2e controllers faults)

# 4. The tracks, niced: every other build and check. A failure marks its
# track.
image_checks() { (cd hack/images && go vet ./... && PEERDISCOVERY_IMAGES_REQUIRED=1 go test -vet=off -count=1 ./...); }
track() {
  NODE_COMPONENTS="kube-scheduler kubeadm" hack/build-all.sh node &&
    stage::run "container images (hack/build-images.sh)" hack/build-images.sh &&
    stage::run "container image checks (hack/images)" image_checks &&
    stage::run "verify deploy manifests" hack/verify-manifests.sh &&
    hack/verify.sh vet codegen &&
    PEERDISCOVERY_KUBEADM_REQUIRED=1 PEERDISCOVERY_VETTED=1 hack/test-unit.sh
}
# Prometheus' packages share no compile with the track's, so they fill the
# cores the lanes and the track leave. promtool's checks (its build: 311 CPU
# seconds cold) run on demand: hack/verify-monitoring.sh promtool.
monitoring_track() {
  stage::run "monitoring checks (alert rules and dashboard queries through Prometheus' parsers)" hack/verify-monitoring.sh parser
}

tracks=(track monitoring_track)
stage::run_side_by_side() {
  local pids=() names=() rc=0 i name
  for name in "${lanes[@]}"; do
    stage::run "lane ${name}" "lane_${name}" >"${OUTPUT_DIR}/e2e-test-${name}.log" 2>&1 &
    pids+=($!)
    names+=("lane ${name}")
  done
  for name in "${tracks[@]}"; do
    (
      renice -n 10 -p "${BASHPID}" >/dev/null
      "${name}" >"${OUTPUT_DIR}/test-${name}.log" 2>&1 || { touch "${READY_DIR}/${name}-failed"; exit 1; }
    ) &
    pids+=($!)
    names+=("${name}")
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[i]}"; then
      rc=1
      log::error "${names[i]} failed"
    fi
  done
  for name in "${lanes[@]}"; do
    log::info "=== lane ${name} (${OUTPUT_DIR}/e2e-test-${name}.log)"
    grep -E '^(ok|FAIL|---|panic)|^[[:space:]]+[a-z_]+_test\.go:[0-9]+:' "${OUTPUT_DIR}/e2e-test-${name}.log" | head -200 || true
  done
  for name in "${lanes[@]}"; do
    grep -B25 -E '^FAIL[[:space:]]+sigs\.k8s\.io/' "${OUTPUT_DIR}/e2e-test-${name}.log" | grep -vE '^(ok|PASS)' || true
  done >"${OUTPUT_DIR}/test-failures.txt"
  for name in "${tracks[@]}"; do
    [[ ! -e "${READY_DIR}/${name}-failed" ]] || tail -25 "${OUTPUT_DIR}/test-${name}.log" >>"${OUTPUT_DIR}/test-failures.txt"
    log::info "=== ${name} (${OUTPUT_DIR}/test-${name}.log)"
    grep -E '^\[|^(ok|FAIL|---)' "${OUTPUT_DIR}/test-${name}.log" | tail -60 || true
  done
  # One row per end-to-end package, with its own seconds, into the table.
  grep -hE '^(ok|FAIL)[[:space:]]+sigs.k8s.io/peerdiscovery/test/' "${OUTPUT_DIR}"/e2e-test-*.log |
    awk '{ t = $NF; sub(/s$/, "", t); printf "  %s %s\t%d\t%s\n", $1, $2, t, ($1 == "ok" ? "ran (-count=1)" : "failed") }' |
    sed 's|sigs.k8s.io/peerdiscovery/||' >>"${PEERDISCOVERY_STAGE_FILE}" || true
  return "${rc}"
}
stage::run "end-to-end lanes and the tracks, side by side" stage::run_side_by_side ||
  die "end-to-end tests or a track failed (logs: ${OUTPUT_DIR}/e2e-test-*.log, ${OUTPUT_DIR}/test-track.log, ${OUTPUT_DIR}/test-monitoring_track.log)"

log::info "all tests passed in $(($(date +%s) - test_start))s"
