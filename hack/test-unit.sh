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

# The unit tests, with the race detector (hack/test.sh's stage, `make unit`);
# the log goes to _output/unit-test.log.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
mkdir -p "${OUTPUT_DIR}"

# hack/test.sh runs go vet -race ./... beside it (PEERDISCOVERY_VETTED=1):
# go test's own vet, with other flags, would analyse every dependency again.
vet=()
[[ -z "${PEERDISCOVERY_VETTED:-}" ]] || vet=(-vet=off)

# Unit tests may be served from go test's cache: their inputs are all Go
# files go test sees.
unit_tests() {
  # hack/request-walk analyses hack/request-walk.sh's trace (on demand).
  # test/alerts, test/bench and test/kubeadm run on demand (they start
  # their own planes), but their control-plane-free tests are unit tests:
  # without their gates those run and the rest skip (test/kubeadm's needs
  # kubeadm built: PEERDISCOVERY_KUBEADM_REQUIRED, which hack/test.sh sets,
  # makes its absence a failure).
  go test -race "${vet[@]}" -timeout 20m ./internal/... ./pkg/... ./cmd/... ./hack/request-walk ./test/alerts ./test/bench ./test/kubeadm 2>&1 | tee "${OUTPUT_DIR}/unit-test.log"
  local rc=${PIPESTATUS[0]} total cached
  # The server's options again as the image build stamps the binary
  # (VERSION): k8s.io/apiserver reads that stamp as a Kubernetes version.
  go test -race "${vet[@]}" -count=1 -ldflags "-X k8s.io/component-base/version.gitVersion=$(tr -d '[:space:]' <VERSION)" \
    ./pkg/cmd/server 2>&1 | tee -a "${OUTPUT_DIR}/unit-test.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
  total="$(grep -cE '^(ok|FAIL)[[:space:]]' "${OUTPUT_DIR}/unit-test.log" || true)"
  cached="$(grep -cE '^ok[[:space:]].*\(cached\)' "${OUTPUT_DIR}/unit-test.log" || true)"
  STAGE_NOTE="ran; ${cached} of ${total} packages from the test cache"
  return "${rc}"
}
stage::run "unit tests (race detector)" unit_tests
