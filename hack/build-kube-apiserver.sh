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

# Builds a real kube-apiserver of a Kubernetes release with the peerdiscovery
# filter linked in, from the Go module proxy, into
#   _output/bin/kube-apiserver-VERSION/kube-apiserver
#
# For each VERSION a wrapper module is generated under
# _output/build/kube-apiserver-VERSION/ (hack/lib/kube-release.sh):
#   - it requires k8s.io/kubernetes VERSION, replaces its staging modules by
#     the published k8s.io/X v0.MINOR.PATCH and pins the release's other
#     requirements to the release's versions;
#   - it replaces sigs.k8s.io/peerdiscovery by this checkout. Replaces win
#     over this repository's own k8s.io/* v0.37.x requirements, so a v1.36
#     build compiles the filter against the v0.36 libraries, as it must run.
#   - its main is hack/kube-apiserver/main.go plus the release-specific
#     hack/kube-apiserver/v1.MINOR/release.go.
#
# Cache: the build is skipped while the binary exists and its stamp file
# records the same hash of the inputs (wrapper sources, this script and
# hack/lib, go.mod/go.sum, every non-test source file of the packages of this
# repository that pkg/filter imports, the Go version). A rebuild after a small
# filter change mostly hits the Go build cache. FORCE=1 rebuilds anyway;
# KUBE_GENERATE_ONLY=1 only generates (and tidies) the wrapper module.
# A cold build takes about 9 minutes on 2 cores.
#
# Usage: hack/build-kube-apiserver.sh [VERSION...]   (default: ${KUBE_VERSIONS})
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/kube-release.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kube-release.sh"

WRAPPER_SRC="${REPO_ROOT}/hack/kube-apiserver"

# filter_source_files prints, one per line and sorted, the non-test source
# files of every package of filter_packages (those a build tag leaves out
# too: a v1.35 build uses one).
# shellcheck disable=SC2016 # $d in single quotes is Go template syntax
filter_source_files() {
  local tmpl kind
  tmpl='{{$d := .Dir}}'
  for kind in GoFiles IgnoredGoFiles CgoFiles CFiles HFiles SFiles EmbedFiles; do
    tmpl+='{{range .'"${kind}"'}}{{$d}}/{{.}}{{"\n"}}{{end}}'
  done
  local -a pkgs
  mapfile -t pkgs < <(filter_packages)
  (cd "${REPO_ROOT}" && go list -e -f "${tmpl}" "${pkgs[@]}") | sed '/^$/d' | LC_ALL=C sort -u
}

# input_manifest VERSION MINOR prints "sha256  path" for every build input,
# plus the version and toolchain lines.
input_manifest() {
  local version="${1}" minor="${2}"
  echo "version ${version}"
  echo "go $(go_version) $(go env GOOS)/$(go env GOARCH)"
  echo "pin-release-deps ${KUBE_PIN_RELEASE_DEPS:-true}"
  {
    echo "${WRAPPER_SRC}/main.go"
    echo "${WRAPPER_SRC}/v1.${minor}/release.go"
    echo "${REPO_ROOT}/hack/build-kube-apiserver.sh"
    kube_release_lib_files
    echo "${REPO_ROOT}/go.mod"
    echo "${REPO_ROOT}/go.sum"
    filter_source_files
  } | hash_files
}

# generate_wrapper VERSION MINOR DIR writes the wrapper module: the release's
# (see kube_release_gomod) with this checkout required and replaced.
generate_wrapper() {
  local version="${1}" minor="${2}" dir="${3}"
  mkdir -p "${dir}"
  # Start from a clean module every time; go.sum is kept as a hint only
  # (tidy rewrites it).
  rm -f "${dir}"/*.go
  kube_release_gomod "${version}" kube-apiserver \
    --require "${MAIN_MODULE} v0.0.0-00010101000000-000000000000" \
    --replace "${MAIN_MODULE} => ${REPO_ROOT}" >"${dir}/go.mod"
  cp "${WRAPPER_SRC}/main.go" "${dir}/main.go"
  cp "${WRAPPER_SRC}/v1.${minor}/release.go" "${dir}/release.go"
}

build_one() {
  local version="${1}"
  local bin wrapper manifest digest start
  semver_parts "${version}"
  # shellcheck disable=SC2153 # MINOR is set by semver_parts
  local kube_minor="${MINOR}"
  [[ "${MAJOR}" == "1" ]] || die "unsupported Kubernetes version ${version}"
  [[ -f "${WRAPPER_SRC}/v1.${kube_minor}/release.go" ]] ||
    die "no ${WRAPPER_SRC#"${REPO_ROOT}"/}/v1.${kube_minor}/release.go: Kubernetes v1.${kube_minor} is not supported"
  is_known_kube_version "${version}" ||
    log::warn "kube-apiserver ${version} is not one of KUBE_VERSIONS (${KUBE_VERSIONS})"

  bin="$(kube_apiserver_bin "${version}")"
  wrapper="${BUILD_DIR}/kube-apiserver-${version}"

  manifest="$(input_manifest "${version}" "${kube_minor}")"
  digest="$(manifest_digest "${manifest}")"
  if stamp_up_to_date "${bin}" "${digest}"; then
    log::info "kube-apiserver ${version}: up to date (${bin})"
    return 0
  fi

  start="$(date +%s)"
  log::info "kube-apiserver ${version}: generating wrapper module in ${wrapper}"
  generate_wrapper "${version}" "${kube_minor}" "${wrapper}"
  (
    cd "${wrapper}"
    go mod tidy
    if [[ -n "${KUBE_GENERATE_ONLY:-}" ]]; then
      log::info "kube-apiserver ${version}: KUBE_GENERATE_ONLY is set, not building"
      exit 0
    fi
    log::info "kube-apiserver ${version}: go build (a cold build takes ~9 min on 2 cores)"
    # v1.35's upstream peer-proxy metrics differ (pkg/filter/metrics/upstream_k8s135.go).
    local tags=""
    if [[ "${kube_minor}" == "35" ]]; then
      tags="peerdiscovery_k8s135"
    fi
    go_compile build -tags "${tags}" -ldflags "$(version_ldflags "${version}")" -o "${bin}.tmp" .
  )
  [[ -z "${KUBE_GENERATE_ONLY:-}" ]] || return 0
  install_binary "${bin}.tmp" "${bin}"
  write_stamp "${bin}" "${digest}" "${start}" "${manifest}"
  log::info "kube-apiserver ${version}: built ${bin} in $(elapsed_since "${start}")"
  "${bin}" --version >&2
}

main() {
  local -a versions
  mapfile -t versions < <(versions_or "${KUBE_VERSIONS}" "$@")
  local v
  for v in "${versions[@]}"; do
    with_lock "${OUTPUT_DIR}/locks/kube-apiserver-${v}.lock" build_one "${v}"
  done
}

main "$@"
