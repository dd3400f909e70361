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

# The static checks, first in hack/test.sh (and `make verify`): gofmt,
# license headers, go vet, generated code, and the filter's compile
# constraint (its packages build against every supported release's
# libraries), all before any binary is built. Each is a stage of
# hack/test.sh's table (hack/lib/common.sh).
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

check_gofmt() {
  local unformatted
  unformatted="$(gofmt -l cmd internal pkg test hack 2>/dev/null || true)"
  [[ -z "${unformatted}" ]] || die "gofmt needed on: ${unformatted}"
}
stage::run "gofmt" check_gofmt
stage::run "license headers" hack/verify-boilerplate.sh
# -race: vet compiles every package's dependencies, and with the race
# detector's settings that compile is the one the unit and end-to-end tests
# (go test -race) reuse, not a third one of its own.
stage::run "go vet (downloads the modules on a cold machine; -race, to share the tests' compile)" go vet -race ./...
stage::run "verify generated code" hack/verify-codegen.sh
# hack/test.sh builds kube-apiserver of every release in KUBE_VERSIONS right
# after this (each linking these packages against that release's libraries,
# rebuilt whenever an input changes): the same check, so it skips this one,
# which on a cold machine took 5 to 13 minutes of CI's 60.
if [[ "${PEERDISCOVERY_KUBE_APISERVER_BUILDS_FOLLOW:-}" != "1" ]]; then
  stage::run "the filter builds against every supported release's libraries" hack/verify-filter-builds.sh
fi
