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

step() { log::info "=== $*"; }
start=$(date +%s)

step "static checks: gofmt, license headers, vet, generated code, the filter's compile constraint"
hack/verify.sh

step "build real binaries (cached)"
hack/build-all.sh

step "verify deploy manifests"
hack/verify-manifests.sh

step "unit tests (race detector)"
hack/test-unit.sh

step "scale tests: 5 peers x 5,000 GVRs (no race detector, which multiplies memory and time)"
go test -count=1 -timeout 20m -v -run 'TestScale|TestMemory' ./test/scale ./pkg/registry/memstore 2>&1 \
  | tee "${OUTPUT_DIR}/scale-test.log" | grep -E '^(--- |ok|FAIL|PASS)|scale:|heap'

step "test dependencies (the Kubernetes Python client)"
hack/install-test-deps.sh

step "integration and end-to-end tests on real binaries (race detector)"
# These packages start real etcd and kube-apiservers from _output/bin in
# network namespaces of their own (a subnet each); PEERDISCOVERY_E2E=1 turns
# them on. Two lanes side by side: upstream's conformance suite and the
# upgrade drill mostly wait (on controllers, shutdown delays, settle
# times), so they run beside the other packages, which run one at a time.
e2e() {
  PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" go test -race -p 1 -timeout 60m "$@"
}
waiting=(./test/conformance ./test/upgradedrill)
# -race as in the run: a package built only without it (test/scale) drops out.
mapfile -t busy < <(go list -race ./test/... | grep -v -e '/test/conformance$' -e '/test/upgradedrill$')
e2e "${waiting[@]}" >"${OUTPUT_DIR}/e2e-test-waiting.log" 2>&1 &
waiting_pid=$!
busy_rc=0
e2e "${busy[@]}" 2>&1 | tee "${OUTPUT_DIR}/e2e-test.log" || busy_rc=$?
waiting_rc=0
wait "${waiting_pid}" || waiting_rc=$?
cat "${OUTPUT_DIR}/e2e-test-waiting.log"
(( busy_rc == 0 && waiting_rc == 0 )) || die "end-to-end tests failed (logs: ${OUTPUT_DIR}/e2e-test.log, ${OUTPUT_DIR}/e2e-test-waiting.log)"

log::info "all tests passed in $(( $(date +%s) - start ))s"
