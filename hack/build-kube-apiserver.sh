#!/usr/bin/env bash
# Builds a real kube-apiserver of a Kubernetes release with the peerdiscovery
# filter linked in, from the Go module proxy, into
#   _output/bin/kube-apiserver-VERSION/kube-apiserver
#
# k8s.io/kubernetes is a module whose staging dependencies are replaced by
# ./staging directories, so it cannot be required as is. For each VERSION a
# wrapper module is generated under _output/build/kube-apiserver-VERSION/:
#   - it requires k8s.io/kubernetes VERSION;
#   - it replaces every staging module listed in that release's go.mod
#     (k8s.io/X => ./staging/src/k8s.io/X) by the published k8s.io/X
#     v0.MINOR.PATCH;
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

# shellcheck source-path=SCRIPTDIR source=lib/golang.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/golang.sh"

WRAPPER_SRC="${REPO_ROOT}/hack/kube-apiserver"
FILTER_PKG="./pkg/filter"

# filter_source_files prints, one per line and sorted, the non-test source
# files of every package of this repository in pkg/filter's import closure.
# shellcheck disable=SC2016 # $d in single quotes is Go template syntax
filter_source_files() {
  local tmpl kind
  tmpl='{{if and .Module (eq .Module.Path "'"${MAIN_MODULE}"'")}}{{$d := .Dir}}'
  for kind in GoFiles CgoFiles CFiles HFiles SFiles EmbedFiles; do
    tmpl+='{{range .'"${kind}"'}}{{$d}}/{{.}}{{"\n"}}{{end}}'
  done
  tmpl+='{{end}}'
  (cd "${REPO_ROOT}" && go list -e -deps -f "${tmpl}" "${FILTER_PKG}") | sed '/^$/d' | LC_ALL=C sort -u
}

# input_manifest VERSION MINOR prints "sha256  path" for every build input,
# plus the version and toolchain lines.
input_manifest() {
  local version="${1}" minor="${2}" f
  echo "version ${version}"
  echo "go $(go_version) $(go env GOOS)/$(go env GOARCH)"
  echo "pin-release-deps ${KUBE_PIN_RELEASE_DEPS:-true}"
  {
    echo "${WRAPPER_SRC}/main.go"
    echo "${WRAPPER_SRC}/v1.${minor}/release.go"
    echo "${REPO_ROOT}/hack/build-kube-apiserver.sh"
    echo "${REPO_ROOT}/hack/lib/common.sh"
    echo "${REPO_ROOT}/hack/lib/golang.sh"
    echo "${REPO_ROOT}/go.mod"
    echo "${REPO_ROOT}/go.sum"
    filter_source_files
  } | LC_ALL=C sort -u | while IFS= read -r f; do
    if [[ -f "${f}" ]]; then
      echo "$(sha256sum <"${f}" | cut -d' ' -f1)  ${f#"${REPO_ROOT}"/}"
    else
      echo "missing  ${f#"${REPO_ROOT}"/}"
    fi
  done
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

# generate_wrapper VERSION MINOR PATCH DIR writes the wrapper module.
#
# Besides the staging replaces, every other module the release requires is
# pinned (replaced) to the release's own version, unless
# KUBE_PIN_RELEASE_DEPS=false. Without the pins, minimal version selection
# would lift them to this repository's newer requirements (for v1.36.3:
# cel-go, etcd client, grpc, otel, kube-openapi, structured-merge-diff, ...),
# and the "v1.36.3" server would no longer be the release. The filter has to
# compile against what the release ships anyway.
generate_wrapper() {
  local version="${1}" minor="${2}" patch="${3}" dir="${4}" m v gomod
  local staging_version="v0.${minor}.${patch}"
  local -a mods pins godebug
  gomod="$(kube_gomod "${version}")"
  mapfile -t mods < <(staging_modules "${gomod}")
  ((${#mods[@]} > 0)) || die "no staging modules found in k8s.io/kubernetes@${version}"
  pins=()
  if [[ "${KUBE_PIN_RELEASE_DEPS:-true}" != "false" ]]; then
    mapfile -t pins < <(release_requirements "${gomod}")
  fi
  # Runtime GODEBUG defaults of the release (e.g. "godebug default=go1.26").
  mapfile -t godebug < <(grep -E '^godebug[[:space:]]' "${gomod}" || true)

  mkdir -p "${dir}"
  # Start from a clean module every time; go.sum is kept as a hint only
  # (tidy rewrites it).
  rm -f "${dir}"/*.go
  {
    echo "// Generated by hack/build-kube-apiserver.sh; do not edit."
    echo "module peerdiscovery.local/build/kube-apiserver"
    echo
    echo "go $(go_mod_go_directive)"
    echo
    if ((${#godebug[@]} > 0)); then
      printf '%s\n' "${godebug[@]}"
      echo
    fi
    echo "require ("
    echo "	k8s.io/kubernetes ${version}"
    echo "	${MAIN_MODULE} v0.0.0-00010101000000-000000000000"
    echo ")"
    echo
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
        [[ "${m}" == "${MAIN_MODULE}" ]] && continue
        echo "	${m} => ${m} ${v}"
      done
    fi
    echo
    echo "	${MAIN_MODULE} => ${REPO_ROOT}"
    echo ")"
  } >"${dir}/go.mod"
  cp "${WRAPPER_SRC}/main.go" "${dir}/main.go"
  cp "${WRAPPER_SRC}/v1.${minor}/release.go" "${dir}/release.go"
}

build_one() {
  local version="${1}"
  local bin stamp wrapper manifest digest start
  semver_parts "${version}"
  # shellcheck disable=SC2153 # MINOR and PATCH are set by semver_parts
  local kube_minor="${MINOR}" kube_patch="${PATCH}"
  [[ "${MAJOR}" == "1" ]] || die "unsupported Kubernetes version ${version}"
  [[ -f "${WRAPPER_SRC}/v1.${kube_minor}/release.go" ]] ||
    die "no ${WRAPPER_SRC#"${REPO_ROOT}"/}/v1.${kube_minor}/release.go: Kubernetes v1.${kube_minor} is not supported"
  is_known_kube_version "${version}" ||
    log::warn "kube-apiserver ${version} is not one of KUBE_VERSIONS (${KUBE_VERSIONS})"

  bin="$(kube_apiserver_bin "${version}")"
  stamp="${bin}.stamp"
  wrapper="${BUILD_DIR}/kube-apiserver-${version}"

  manifest="$(input_manifest "${version}" "${kube_minor}")"
  digest="$(sha256sum <<<"${manifest}" | cut -d' ' -f1)"
  if [[ -z "${FORCE:-}" && -x "${bin}" && -f "${stamp}" ]] &&
    [[ "$(head -n1 "${stamp}")" == "inputs-sha256 ${digest}" ]]; then
    log::info "kube-apiserver ${version}: up to date (${bin})"
    return 0
  fi

  start="$(date +%s)"
  log::info "kube-apiserver ${version}: generating wrapper module in ${wrapper}"
  generate_wrapper "${version}" "${kube_minor}" "${kube_patch}" "${wrapper}"
  (
    cd "${wrapper}"
    go mod tidy
    if [[ -n "${KUBE_GENERATE_ONLY:-}" ]]; then
      log::info "kube-apiserver ${version}: KUBE_GENERATE_ONLY is set, not building"
      exit 0
    fi
    log::info "kube-apiserver ${version}: go build (a cold build takes ~9 min on 2 cores)"
    go build -ldflags "$(version_ldflags "${version}")" -o "${bin}.tmp" .
  )
  [[ -z "${KUBE_GENERATE_ONLY:-}" ]] || return 0
  install_binary "${bin}.tmp" "${bin}"
  {
    echo "inputs-sha256 ${digest}"
    echo "built $(date -u +'%Y-%m-%dT%H:%M:%SZ') in $(elapsed_since "${start}")"
    echo "${manifest}"
  } >"${stamp}"
  log::info "kube-apiserver ${version}: built ${bin} in $(elapsed_since "${start}")"
  "${bin}" --version >&2
}

main() {
  local -a versions
  if (($# > 0)); then
    versions=("$@")
  else
    read -r -a versions <<<"${KUBE_VERSIONS}"
  fi
  local v
  for v in "${versions[@]}"; do
    with_lock "${OUTPUT_DIR}/locks/kube-apiserver-${v}.lock" build_one "${v}"
  done
}

main "$@"
