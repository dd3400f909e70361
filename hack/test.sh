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
# real local mixed-version control plane (test/conformance among them:
# upstream's own e2e tests through each kube-apiserver). This is the README's test command
# and what .ci/run calls. Binaries are cached under _output/.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

# Not "start": stage::run has a local of that name, and a stage that fails
# exits through the EXIT trap below inside its scope.
test_start=$(date +%s)
# Every stage's seconds and whether a build was cached, printed at the end
# (also when a stage fails): the table in docs/testing.md ("CI's time") comes from it.
export PEERDISCOVERY_STAGE_FILE="${OUTPUT_DIR}/test-stages.tsv"
mkdir -p "${OUTPUT_DIR}"
: >"${PEERDISCOVERY_STAGE_FILE}"
report() {
  local rc=$?
  echo
  stage::table
  log::info "hack/test.sh: rc ${rc} in $(($(date +%s) - test_start))s"
}
trap report EXIT

# CI builds and tests the supported releases, DEFAULT_KUBE_VERSIONS
# (v1.36.3, v1.37.2). v1.35.4 and test/e2e135, the upgrade from it, run on
# demand (docs/testing.md): about 6 of a cold run's minutes for a release the
# design does not support.
export KUBE_VERSIONS="${DEFAULT_KUBE_VERSIONS}"

# The static checks (hack/verify.sh): gofmt, license headers, vet, generated
# code; each records its own stage. The filter's compile constraint against
# every release is checked by the kube-apiserver builds below.
PEERDISCOVERY_KUBE_APISERVER_BUILDS_FOLLOW=1 hack/verify.sh

# The builds, one stage per binary (cached or built).
hack/build-all.sh

stage::run "verify deploy manifests" hack/verify-manifests.sh

# The container images (OCI archives, no daemon; hack/build-all.sh built
# their binaries) and hack/images's checks of them: user, entrypoint, no
# shell, static binaries, the filter in kube-apiserver, the Dockerfile's
# build flags.
stage::run "container images (hack/build-images.sh)" hack/build-images.sh
image_checks() { (cd hack/images && go vet ./... && PEERDISCOVERY_IMAGES_REQUIRED=1 go test -count=1 ./...); }
stage::run "container image checks (hack/images)" image_checks

# The unit tests (hack/test-unit.sh), one stage.
hack/test-unit.sh

# The packages below start real binaries from _output/bin, which go test
# does not count among a package's inputs: -count=1 so that no result is
# ever served from the test cache.
scale_tests() {
  # Static (CGO_ENABLED=0), as the release builds: the libraries compiled
  # for kube-apiserver and peerdiscovery-apiserver serve these tests too.
  CGO_ENABLED=0 go test -count=1 -timeout 20m -v -run 'TestScale|TestMemory' ./test/scale ./pkg/registry/memstore 2>&1 |
    tee "${OUTPUT_DIR}/scale-test.log" | grep -E '^(--- |ok|FAIL|PASS)|scale:|heap'
  return "${PIPESTATUS[0]}"
}
stage::run "scale tests: 5 peers x 5,000 GVRs (no race detector, which multiplies memory and time)" scale_tests

stage::run "test dependencies (the Kubernetes Python client)" hack/install-test-deps.sh
stage::run "node dependencies (containerd, runc, CNI plugins, iptables)" hack/install-node-deps.sh
node_cleanup_test() {
  # -race: the unit tests' build of this package, linked already.
  PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" go test -count=1 -race -run '^TestNodeCleanupAfterCrash$' ./internal/localcluster
}
stage::run "the node-based plane's cleanup after a crashed harness (containerd, kubelet, a Pod)" node_cleanup_test

# These packages start real etcd and kube-apiservers from _output/bin in
# network namespaces of their own (a subnet each); PEERDISCOVERY_E2E=1 turns
# them on. Three lanes side by side: upstream's conformance suite alone;
# the upgrade drill, the node-based plane and the chaos soak (test/chaos:
# seed 4923, 150 s of episodes), which mostly wait (on controllers,
# kubelets, shutdown delays, settle times, fault holds); and the other
# packages, one at a time. Beside them runs hack/verify-monitoring.sh
# (promtool check and test rules, the dashboard's queries), a stage of its
# own: warm it takes a second, but cold (empty Go build cache) it took 300-350 s
# building promtool, which CI's budget has no room for in a row. The
# packages that run on demand only (docs/testing.md) are not built here;
# go vet above type-checks them.
e2e() {
  PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" go test -count=1 -race -p 1 -timeout 60m "$@"
}
end_to_end() {
  local conformance=(./test/conformance) waiting=(./test/upgradedrill ./test/nodeplane ./test/chaos) busy
  local on_demand=(./test/e2e135 ./test/alerts ./test/bench ./test/crdchurn ./test/relist)
  local logs=("${OUTPUT_DIR}/e2e-test.log" "${OUTPUT_DIR}/e2e-test-conformance.log" "${OUTPUT_DIR}/e2e-test-waiting.log")
  local pids=() rc=0 p monitoring_pid monitoring_rc=0
  # -race as in the run: a package built only without it (test/scale) drops out.
  local others
  others="$(printf '%s|' "${conformance[@]#./}" "${waiting[@]#./}" "${on_demand[@]#./}")"
  mapfile -t busy < <(go list -race ./test/... | grep -v -E "^${MAIN_MODULE}/(${others%|})(/|\$)")
  stage::run "monitoring checks, beside the end-to-end lanes (promtool check and test rules, dashboard queries)" \
    hack/verify-monitoring.sh >"${OUTPUT_DIR}/verify-monitoring.log" 2>&1 &
  monitoring_pid=$!
  e2e "${conformance[@]}" >"${logs[1]}" 2>&1 &
  pids+=($!)
  e2e "${waiting[@]}" >"${logs[2]}" 2>&1 &
  pids+=($!)
  e2e "${busy[@]}" 2>&1 | tee "${logs[0]}" || rc=$?
  for p in "${pids[@]}"; do wait "${p}" || rc=$?; done
  wait "${monitoring_pid}" || monitoring_rc=$?
  cat "${logs[@]:1}" "${OUTPUT_DIR}/verify-monitoring.log"
  # One line per package, with its own seconds, into the table.
  grep -hE '^(ok|FAIL|---)[[:space:]]+sigs.k8s.io/peerdiscovery/test/' "${logs[@]}" |
    awk '{ t = $NF; sub(/s$/, "", t); printf "  %s %s\t%d\t%s\n", $1, $2, t, ($1 == "ok" ? "ran (-count=1)" : "failed") }' |
    sed 's|sigs.k8s.io/peerdiscovery/||' >>"${PEERDISCOVERY_STAGE_FILE}" || true
  ((rc == 0)) || die "end-to-end tests failed (logs: ${OUTPUT_DIR}/e2e-test*.log)"
  ((monitoring_rc == 0)) || die "monitoring checks failed (log: ${OUTPUT_DIR}/verify-monitoring.log)"
}
stage::run "integration and end-to-end tests on real binaries (race detector, -count=1); the monitoring checks beside them" end_to_end

log::info "all tests passed in $(($(date +%s) - test_start))s"
