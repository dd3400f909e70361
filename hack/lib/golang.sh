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

# Go build helpers shared by hack/build-*.sh. Source after common.sh.

if [[ -n "${PEERDISCOVERY_GOLANG_SOURCED:-}" ]]; then
  return 0
fi
PEERDISCOVERY_GOLANG_SOURCED=1

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The wrapper modules are built with the machine's toolchain; never let a go
# directive trigger a toolchain download.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# Wrapper modules are generated, not git checkouts.
case " ${GOFLAGS:-} " in
*" -buildvcs="*) ;;
*) export GOFLAGS="${GOFLAGS:+${GOFLAGS} }-buildvcs=false" ;;
esac

# go_version prints the toolchain version, e.g. go1.26.8.
go_version() { go env GOVERSION; }

# go_mod_go_directive prints the "go" line to put into a generated go.mod:
# the toolchain's language version (go1.26.8 -> 1.26.0).
go_mod_go_directive() {
  local v
  v="$(go_version)"
  v="${v#go}"
  if [[ "${v}" =~ ^([0-9]+)\.([0-9]+) ]]; then
    echo "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.0"
  else
    die "cannot parse go version: ${v}"
  fi
}

# go_mod_download_field MODULE@VERSION FIELD prints one field (Dir, GoMod,
# Zip, ...) of `go mod download -json`, downloading through the module proxy
# if needed. Runs outside any module.
go_mod_download_field() {
  local modver="${1}" field="${2}" json
  json="$(cd / && GO111MODULE=on GOFLAGS='' go mod download -json "${modver}")" ||
    die "go mod download ${modver} failed"
  sed -n "s/^[[:space:]]*\"${field}\": \"\(.*\)\",\{0,1\}$/\1/p" <<<"${json}" | head -n1
}

# version_ldflags VERSION prints the -ldflags value that stamps a Kubernetes
# binary with VERSION, the way upstream's kube::version::ldflags does: the
# same variables in k8s.io/component-base/version (what --version and
# /version report) and k8s.io/client-go/pkg/version (the loopback clients'
# user agent).
#   gitVersion/gitMajor/gitMinor  from VERSION
#   gitTreeState=clean            the released module is built unmodified
#   gitCommit=""                  the module proxy does not carry the commit
#   buildDate                     now, or SOURCE_DATE_EPOCH if set
# and -s -w, as upstream's release builds (common.sh, GOFLAGS).
version_ldflags() {
  local version="${1}" build_date pkg kv
  semver_parts "${version}"
  if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
    build_date="$(date -u --date="@${SOURCE_DATE_EPOCH}" +'%Y-%m-%dT%H:%M:%SZ')"
  else
    build_date="$(date -u +'%Y-%m-%dT%H:%M:%SZ')"
  fi
  local -a flags=(-s -w)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for kv in \
      "gitVersion=${version}" \
      "gitMajor=${MAJOR}" \
      "gitMinor=${MINOR}" \
      "gitTreeState=clean" \
      "gitCommit=" \
      "buildDate=${build_date}"; do
      flags+=("-X ${pkg}.${kv}")
    done
  done
  echo "${flags[*]}"
}

# install_binary SRC DST moves a freshly built binary into place atomically.
install_binary() {
  local src="${1}" dst="${2}"
  mkdir -p "$(dirname "${dst}")"
  chmod 0755 "${src}"
  mv -f "${src}" "${dst}"
}
