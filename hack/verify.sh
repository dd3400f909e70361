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

# The static checks (`make verify`): gofmt, license headers, go vet,
# generated code, and the filter's compile constraint (its packages build
# against every supported release's libraries). Each is a stage of
# hack/test.sh's table (hack/lib/common.sh). hack/test.sh runs them in two
# parts: "quick" (seconds) first, the rest beside the end-to-end lanes.
#
# Usage: hack/verify.sh [quick|vet|codegen|filter-builds]...   (default: all)
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

check_gofmt() {
  local unformatted
  # A file gofmt cannot parse is an error (on stderr, exit 2), not a pass.
  unformatted="$(gofmt -l cmd internal pkg test hack)" || die "gofmt failed (above)"
  [[ -z "${unformatted}" ]] || die "gofmt needed on: ${unformatted}"
}

# check_file_length fails on a hand-written Go file over 450 lines: one
# that long holds more than one job, and a newcomer cannot read it whole.
check_file_length() {
  local long
  long="$(find cmd internal pkg test hack -name '*.go' -not -name 'zz_generated*' -not -path 'pkg/generated/*' -print0 |
    xargs -0 awk 'FNR == 1 && prev { if (n > 450) print prev " (" n " lines)" } { prev = FILENAME; n = FNR } END { if (n > 450) print prev " (" n " lines)" }')"
  [[ -z "${long}" ]] || die "Go files over 450 lines (split them along a seam): ${long}"
}

verify_quick() {
  stage::run "gofmt" check_gofmt
  stage::run "license headers" hack/verify-boilerplate.sh
  stage::run "no Go file over 450 lines" check_file_length
}

# -race: vet compiles every package's dependencies, and with the race
# detector's settings that compile is the one the unit and end-to-end tests
# (go test -race) reuse, not a third one of its own.
verify_vet() {
  stage::run "go vet (-race, to share the tests' compile)" go_compile vet -race ./...
  stage::run "go vet of the report modules (hack/drill-report, hack/bench-report)" vet_tool_modules
}

# The report modules under hack/ that replace this module with the
# checkout: a change here that leaves their go.mod untidy, or breaks what
# they import, fails here rather than at hack/chaos.sh's or hack/bench.sh's
# last step. -race, as above: the k8s.io libraries' compile is the one go
# vet -race ./... made. (hack/images and hack/monitoring are built and
# tested in stages of their own; hack/kube-apiserver and hack/e2e-test are
# templates of generated modules.)
vet_tool_modules() {
  local d
  for d in hack/drill-report hack/bench-report; do
    (cd "${d}" && go_compile vet -race ./...) || die "${d}: go vet failed (go mod tidy there if go.mod is out of date)"
  done
}

verify_codegen() {
  stage::run "verify generated code" hack/verify-codegen.sh
}

# The kube-apiserver builds link the filter against the libraries of each
# release they build; this checks the filter's packages alone, in seconds
# when warm, for the releases in KUBE_VERSIONS (hack/test.sh: the ones it
# does not build, v1.35.4 with its build tag).
verify_filter_builds() {
  stage::run "the filter builds against the libraries of ${KUBE_VERSIONS// /, }" hack/verify-filter-builds.sh
}

(($# > 0)) || set -- quick vet codegen filter-builds
for part in "$@"; do
  case "${part}" in
  quick) verify_quick ;;
  vet) verify_vet ;;
  codegen) verify_codegen ;;
  filter-builds) verify_filter_builds ;;
  *) die "unknown part ${part} (usage: hack/verify.sh [quick|vet|codegen|filter-builds]...)" ;;
  esac
done
