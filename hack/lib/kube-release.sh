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

# Helpers for building the binaries of a Kubernetes release from the Go
# module proxy (hack/build-kube-*.sh). Source after golang.sh.
#
# k8s.io/kubernetes is a module whose staging dependencies are replaced by
# ./staging directories, so it cannot be required as is. A build generates a
# wrapper module (kube_release_gomod) that:
#   - requires k8s.io/kubernetes VERSION;
#   - replaces every staging module listed in that release's go.mod
#     (k8s.io/X => ./staging/src/k8s.io/X) by the published k8s.io/X
#     v0.MINOR.PATCH;
#   - pins every other module the release requires to the release's version
#     (unless KUBE_PIN_RELEASE_DEPS=false).
#
# Builds are cached with a stamp file next to the binary (BIN.stamp) whose
# first line is the hash of a manifest of the build inputs; see
# stamp_up_to_date and write_stamp.

if [[ -n "${PEERDISCOVERY_KUBE_RELEASE_SOURCED:-}" ]]; then
  return 0
fi
PEERDISCOVERY_KUBE_RELEASE_SOURCED=1

# shellcheck source-path=SCRIPTDIR source=golang.sh
source "$(dirname "${BASH_SOURCE[0]}")/golang.sh"

# Release binaries are static, as upstream builds them: the container
# images (hack/build-images.sh) have no libc, and a binary built with cgo
# (the default where gcc is installed) would not start in them. This file
# is among every build's cache inputs, so changing it rebuilds them.
export CGO_ENABLED=0
# And without the build machine's paths (-trimpath), as the Dockerfile
# builds: every static build (these, peerdiscovery-apiserver's in
# hack/build-all.sh, hack/build-images.sh and internal/localcluster,
# kubectl, the scale tests) uses the same flags, so one compile of the
# libraries they share serves them all (the image's extension build alone
# compiled them again: ~150 s of a cold run).
case " ${GOFLAGS:-} " in
*" -trimpath "*) ;;
*) export GOFLAGS="${GOFLAGS:+${GOFLAGS} }-trimpath" ;;
esac

# kube_release_lib_files prints the hack/lib files every release build
# sources, so that build scripts list them among their cache inputs.
kube_release_lib_files() {
  printf '%s\n' \
    "${REPO_ROOT}/hack/lib/common.sh" \
    "${REPO_ROOT}/hack/lib/golang.sh" \
    "${REPO_ROOT}/hack/lib/kube-release.sh"
}

# FILTER_PKG is the filter, linked into every kube-apiserver the project
# supports: it and the packages of this repository it imports (its import
# graph, filter_packages) must compile against the k8s.io libraries of each
# release in KUBE_VERSIONS. hack/verify-filter-builds.sh checks that in
# seconds; hack/build-kube-apiserver.sh hashes their sources.
FILTER_PKG="./pkg/filter"

# filter_packages prints, sorted, the import path of every package of this
# repository in FILTER_PKG's import graph, FILTER_PKG included: the one
# list of packages under the compile constraint.
filter_packages() {
  (cd "${REPO_ROOT}" && go list -e -deps -f '{{if and .Module (eq .Module.Path "'"${MAIN_MODULE}"'")}}{{.ImportPath}}{{end}}' "${FILTER_PKG}") |
    sed '/^$/d' | LC_ALL=C sort -u
}

# hash_files reads file paths on stdin and prints "sha256  path" (path
# relative to REPO_ROOT) for each, sorted, or "missing  path": a deleted
# input must change the manifest too.
hash_files() {
  local f
  LC_ALL=C sort -u | while IFS= read -r f; do
    if [[ -f "${f}" ]]; then
      echo "$(sha256sum <"${f}" | cut -d' ' -f1)  ${f#"${REPO_ROOT}"/}"
    else
      echo "missing  ${f#"${REPO_ROOT}"/}"
    fi
  done
}

# manifest_digest MANIFEST prints the sha256 of a manifest of build inputs.
manifest_digest() { sha256sum <<<"${1}" | cut -d' ' -f1; }

# stamp_up_to_date BIN DIGEST succeeds if BIN exists and BIN.stamp records
# DIGEST, unless FORCE is set.
stamp_up_to_date() {
  local bin="${1}" digest="${2}"
  [[ -z "${FORCE:-}" && -x "${bin}" && -f "${bin}.stamp" ]] &&
    [[ "$(head -n1 "${bin}.stamp")" == "inputs-sha256 ${digest}" ]]
}

# write_stamp BIN DIGEST START MANIFEST records a finished build: the digest
# (what stamp_up_to_date compares), when and how long, and the manifest
# itself, so that a surprising rebuild can be explained with diff.
write_stamp() {
  local bin="${1}" digest="${2}" start="${3}" manifest="${4}"
  {
    echo "inputs-sha256 ${digest}"
    echo "built $(date -u +'%Y-%m-%dT%H:%M:%SZ') in $(elapsed_since "${start}")"
    echo "${manifest}"
  } >"${bin}.stamp"
}

# kube_gomod VERSION prints the path of k8s.io/kubernetes VERSION's go.mod in
# the module cache (downloading it if needed).
kube_gomod() {
  local gomod
  gomod="$(go_mod_download_field "k8s.io/kubernetes@${1}" GoMod)"
  [[ -f "${gomod}" ]] || die "no go.mod for k8s.io/kubernetes@${1}"
  echo "${gomod}"
}

# staging_modules GOMOD prints the k8s.io/X modules that the release replaces
# with ./staging/src/k8s.io/X.
staging_modules() {
  sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/k8s\.io/.*$#\1#p' "${1}" | LC_ALL=C sort -u
}

# release_requirements GOMOD prints "path version" for every module the
# release requires (its complete build list: go.mod is pruned since go 1.17),
# except the staging modules (required there as v0.0.0).
release_requirements() {
  awk '
    /^require[[:space:]]*\(/ { inblock = 1; next }
    inblock && /^\)/ { inblock = 0; next }
    inblock && NF >= 2 && $1 !~ /^\/\// { print $1, $2; next }
    /^require[[:space:]]+[^(]/ && NF >= 3 { print $2, $3 }
  ' "${1}" | awk '$2 != "v0.0.0"' | LC_ALL=C sort -u
}

# kube_release_gomod VERSION NAME [--require "PATH VERSION"]...
#                    [--replace "PATH => TARGET"]... [--tool PACKAGE]...
# prints the go.mod of the wrapper module peerdiscovery.local/build/NAME
# (generated by hack/build-NAME.sh) for Kubernetes release VERSION, with the
# extra requirements, replaces and tool packages given.
#
# Besides the staging replaces, every other module the release requires is
# pinned (replaced) to the release's own version, unless
# KUBE_PIN_RELEASE_DEPS=false. Without the pins, minimal version selection
# would lift them to newer requirements of whatever else the wrapper requires
# (for this repository and v1.36.3: cel-go, etcd client, grpc, otel,
# kube-openapi, structured-merge-diff, ...), and the "v1.36.3" binary would
# no longer be the release.
kube_release_gomod() {
  local version="${1}" name="${2}" m v gomod
  shift 2
  local -a requires=() replaces=() tools=() mods pins godebug
  while (($# > 0)); do
    (($# >= 2)) || die "kube_release_gomod: ${1} needs a value"
    case "${1}" in
      --require) requires+=("${2}") ;;
      --replace) replaces+=("${2}") ;;
      --tool) tools+=("${2}") ;;
      *) die "kube_release_gomod: unknown argument ${1}" ;;
    esac
    shift 2
  done
  # Modules replaced explicitly are not pinned: go rejects two replaces of
  # one module.
  local replaced=" "
  for m in ${replaces[@]+"${replaces[@]}"}; do
    replaced+="${m%% *} "
  done

  semver_parts "${version}"
  local staging_version="v0.${MINOR}.${PATCH}"
  gomod="$(kube_gomod "${version}")"
  mapfile -t mods < <(staging_modules "${gomod}")
  ((${#mods[@]} > 0)) || die "no staging modules found in k8s.io/kubernetes@${version}"
  pins=()
  if [[ "${KUBE_PIN_RELEASE_DEPS:-true}" != "false" ]]; then
    mapfile -t pins < <(release_requirements "${gomod}")
  fi
  # Runtime GODEBUG defaults of the release (e.g. "godebug default=go1.26"):
  # only the main module's apply, and that is the wrapper.
  mapfile -t godebug < <(grep -E '^godebug[[:space:]]' "${gomod}" || true)

  echo "// Generated by hack/build-${name}.sh; do not edit."
  echo "module peerdiscovery.local/build/${name}"
  echo
  echo "go $(go_mod_go_directive)"
  echo
  if ((${#godebug[@]} > 0)); then
    printf '%s\n' "${godebug[@]}"
    echo
  fi
  echo "require ("
  echo "	k8s.io/kubernetes ${version}"
  for m in ${requires[@]+"${requires[@]}"}; do
    echo "	${m}"
  done
  echo ")"
  echo
  if ((${#tools[@]} > 0)); then
    echo "tool ("
    for m in "${tools[@]}"; do
      echo "	${m}"
    done
    echo ")"
    echo
  fi
  echo "replace ("
  echo "	// The release's staging modules, as published."
  for m in "${mods[@]}"; do
    echo "	${m} => ${m} ${staging_version}"
  done
  if ((${#pins[@]} > 0)); then
    echo
    echo "	// Everything else at the release's own versions."
    for m in "${pins[@]}"; do
      v="${m#* }"
      m="${m%% *}"
      [[ "${replaced}" == *" ${m} "* ]] && continue
      echo "	${m} => ${m} ${v}"
    done
  fi
  if ((${#replaces[@]} > 0)); then
    echo
    for m in "${replaces[@]}"; do
      echo "	${m}"
    done
  fi
  echo ")"
}

# build_upstream_command NAME CMD BIN_FUNC SCRIPT VERSION... builds
# upstream's k8s.io/kubernetes/cmd/CMD of each release VERSION, unmodified
# (nothing of this repository linked in), into $(BIN_FUNC VERSION), cached
# with a stamp of its inputs (VERSION, the Go toolchain, SCRIPT and hack/lib)
# and built under a lock; NAME labels the wrapper module, lock and logs. The package is built straight from the module cache:
# the wrapper module only lists it as a tool, so that go mod tidy keeps its
# dependencies. FORCE=1 rebuilds; KUBE_GENERATE_ONLY=1 only generates (and
# tidies) the wrapper module.
build_upstream_command() {
  local name="${1}" cmd="${2}" bin_func="${3}" script="${4}" v
  shift 4
  (($# > 0)) || die "build_upstream_command: no version"
  for v in "$@"; do
    with_lock "${OUTPUT_DIR}/locks/${name}-${v}.lock" \
      _build_upstream_command_one "${name}" "${cmd}" "${bin_func}" "${script}" "${v}"
  done
}

_build_upstream_command_one() {
  local name="${1}" cmd="${2}" bin_func="${3}" script="${4}" version="${5}"
  local pkg="k8s.io/kubernetes/cmd/${cmd}"
  local wrapper="${BUILD_DIR}/${name}-${version}"
  local bin manifest digest start
  bin="$("${bin_func}" "${version}")"
  semver_parts "${version}"
  [[ "${MAJOR}" == "1" ]] || die "unsupported Kubernetes version ${version}"
  is_known_kube_version "${version}" ||
    log::warn "${name} ${version} is not one of KUBE_VERSIONS (${KUBE_VERSIONS})"

  manifest="$(
    echo "version ${version}"
    echo "go $(go_version) $(go env GOOS)/$(go env GOARCH)"
    echo "pin-release-deps ${KUBE_PIN_RELEASE_DEPS:-true}"
    echo "package ${pkg}"
    { echo "${script}"; echo "${REPO_ROOT}/go.mod"; kube_release_lib_files; } | hash_files
  )"
  digest="$(manifest_digest "${manifest}")"
  if stamp_up_to_date "${bin}" "${digest}"; then
    log::info "${name} ${version}: up to date (${bin})"
    return 0
  fi

  start="$(date +%s)"
  log::info "${name} ${version}: generating wrapper module in ${wrapper}"
  mkdir -p "${wrapper}"
  # go.mod (go.sum is a hint only: tidy rewrites it) and one file that is
  # never built. It requires this repository, as kube-apiserver's wrapper of
  # the same release does, so that both wrappers have the same build list:
  # the release's code either way (every module the release requires is
  # pinned), but with -trimpath a package's compile is keyed by its
  # module's required version, and only the same versions let this build
  # reuse kube-apiserver's compile of the libraries they share (without
  # it, kube-controller-manager's cold build took 229 s against 83).
  rm -f "${wrapper}"/*.go
  kube_release_gomod "${version}" "${name}" --tool "${pkg}" \
    --require "${MAIN_MODULE} v0.0.0-00010101000000-000000000000" \
    --replace "${MAIN_MODULE} => ${REPO_ROOT}" >"${wrapper}/go.mod"
  cat >"${wrapper}/build_list.go" <<EOF
//go:build peerdiscovery_build_list

// Generated by hack/lib/kube-release.sh; never built (its build tag is set
// nowhere): go mod tidy keeps ${MAIN_MODULE} in the build list for it.
package wrapper

import _ "${MAIN_MODULE}/pkg/apis/peerdiscovery"
EOF
  (
    cd "${wrapper}"
    go mod tidy
    if [[ -n "${KUBE_GENERATE_ONLY:-}" ]]; then
      log::info "${name} ${version}: KUBE_GENERATE_ONLY is set, not building"
      exit 0
    fi
    log::info "${name} ${version}: go build ${pkg}"
    mkdir -p "$(dirname "${bin}")"
    go_compile build -ldflags "$(version_ldflags "${version}")" -o "${bin}.tmp" "${pkg}"
  )
  [[ -z "${KUBE_GENERATE_ONLY:-}" ]] || return 0
  install_binary "${bin}.tmp" "${bin}"
  write_stamp "${bin}" "${digest}" "${start}" "${manifest}"
  log::info "${name} ${version}: built ${bin} in $(elapsed_since "${start}")"
  if [[ "${cmd}" == kubeadm ]]; then
    "${bin}" version -o short >&2 # kubeadm has no --version
  else
    "${bin}" --version >&2
  fi
}
