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

# Builds upstream's Kubernetes e2e test binary of a release from the Go
# module proxy, into
#   _output/bin/e2e-test-VERSION/e2e.test
# stamped so that --version reports VERSION. Its TestMain is upstream's
# (hack/e2e-test/e2e_test.go); only the sig-api-machinery, sig-auth and DRA test
# sources are linked in, which is all hack/conformance.sh selects from.
#
# The wrapper module (_output/build/e2e-test-VERSION) and the cache stamp
# work as for hack/build-kube-apiserver.sh; see hack/lib/kube-release.sh.
# FORCE=1 rebuilds anyway.
#
# Usage: hack/build-e2e-test.sh [VERSION]   (default: the newest of KUBE_VERSIONS)
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/kube-release.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-release.sh"

WRAPPER_SRC="${REPO_ROOT}/hack/e2e-test"

build_one() {
  local version="${1}"
  local wrapper="${BUILD_DIR}/e2e-test-${version}"
  local bin manifest digest start
  bin="$(e2e_test_bin "${version}")"
  manifest="$(
    echo "version ${version}"
    echo "go $(go_version) $(go env GOOS)/$(go env GOARCH)"
    echo "pin-release-deps ${KUBE_PIN_RELEASE_DEPS:-true}"
    {
      echo "${WRAPPER_SRC}/e2e_test.go"
      echo "${REPO_ROOT}/hack/build-e2e-test.sh"
      kube_release_lib_files
    } | hash_files
  )"
  digest="$(manifest_digest "${manifest}")"
  if stamp_up_to_date "${bin}" "${digest}"; then
    log::info "e2e.test ${version}: up to date (${bin})"
    return 0
  fi
  start="$(date +%s)"
  log::info "e2e.test ${version}: generating wrapper module in ${wrapper}"
  mkdir -p "${wrapper}"
  rm -f "${wrapper}"/*.go
  cp "${WRAPPER_SRC}/e2e_test.go" "${wrapper}/"
  kube_release_gomod "${version}" e2e-test >"${wrapper}/go.mod"
  (
    cd "${wrapper}"
    go mod tidy
    log::info "e2e.test ${version}: go test -c"
    mkdir -p "$(dirname "${bin}")"
    # -vet=off: go test -c vets the wrapper, and so analyses each of
    # e2e.test's ~2,800 packages for its facts; none of them is ours.
    go_compile test -c -vet=off -ldflags "$(version_ldflags "${version}")" -o "${bin}.tmp" .
  )
  install_binary "${bin}.tmp" "${bin}"
  write_stamp "${bin}" "${digest}" "${start}" "${manifest}"
  log::info "e2e.test ${version}: built ${bin} in $(elapsed_since "${start}")"
  "${bin}" --version >&2
}

main() {
  local version="${1:-${KUBE_VERSIONS##* }}"
  semver_parts "${version}"
  [[ "${MAJOR}" == "1" ]] || die "unsupported Kubernetes version ${version}"
  with_lock "${OUTPUT_DIR}/locks/e2e-test-${version}.lock" build_one "${version}"
}

main "$@"
