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

# Checks the deploy manifests (artifacts/deploy) without a cluster:
#   - the release in /VERSION, the Dockerfile's VERSION build-arg default and
#     the image tag in artifacts/deploy/base/kustomization.yaml agree (and
#     the tag written in base/deployment.yaml);
#   - every manifest in base/ is listed in its kustomization;
#   - no manifest sets insecureSkipTLSVerify (comments aside);
#   - `kubectl kustomize` builds the base and every overlay, each with the
#     image registry.k8s.io/peerdiscovery/peerdiscovery-apiserver:VERSION
#     and an APIService without insecureSkipTLSVerify;
#   - hack/deploy-certs.sh and this script pass ShellCheck (when it
#     is installed).
# Applying them to a real control plane (--dry-run=server) and the RBAC
# checks are in test/e2e/deploy_test.go; test/nodeplane installs
# overlays/ha with kubectl apply -k on real kubelets.
#
# Usage: hack/verify-manifests.sh
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

IMAGE="registry.k8s.io/peerdiscovery/peerdiscovery-apiserver"
DEPLOY="artifacts/deploy"
failures=0
fail() {
  log::error "${@}"
  failures=$((failures + 1))
}

# The release.
[[ -s VERSION ]] || die "VERSION file missing"
version="$(tr -d '[:space:]' <VERSION)"
[[ "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION is not a semantic version (vX.Y.Z): ${version}"

docker_version="$(sed -n 's/^ARG VERSION=\(.*\)$/\1/p' Dockerfile)"
[[ "${docker_version}" == "${version}" ]] ||
  fail "Dockerfile: ARG VERSION=${docker_version:-<none>}, VERSION file: ${version}"

# newTag of the images entry named ${IMAGE}.
kustomize_tag="$(awk -v img="${IMAGE}" '
  /^[^ #-]/ { in_images = ($0 ~ /^images:/) }
  in_images && $0 ~ "name: *" img "$" { found = 1; next }
  in_images && found && /newTag:/ { sub(/.*newTag: */, ""); gsub(/["'\'' ]/, ""); print; exit }
  in_images && /^- / { found = 0 }
' "${DEPLOY}/base/kustomization.yaml")"
[[ "${kustomize_tag}" == "${version}" ]] ||
  fail "${DEPLOY}/base/kustomization.yaml: images newTag ${kustomize_tag:-<none>} for ${IMAGE}, VERSION file: ${version}"

while read -r tag; do
  [[ "${tag}" == "${version}" ]] ||
    fail "${DEPLOY}/base/deployment.yaml: image tag ${tag}, VERSION file: ${version}"
done < <(sed -n "s|^ *image: *${IMAGE}:\([^ ]*\) *$|\1|p" "${DEPLOY}/base/deployment.yaml")

# Every base manifest is in the kustomization (internal/localcluster applies
# some of these files directly; an unlisted one would be missed by
# kubectl apply -k).
for f in "${DEPLOY}"/base/*.yaml; do
  name="$(basename "${f}")"
  [[ "${name}" == "kustomization.yaml" ]] && continue
  grep -Eq "^- +${name}$" "${DEPLOY}/base/kustomization.yaml" ||
    fail "${DEPLOY}/base/kustomization.yaml does not list ${name}"
done

# No insecureSkipTLSVerify, outside comments.
if bad="$(grep -rn --include='*.yaml' --include='*.yml' -i 'insecureSkipTLSVerify' artifacts | grep -Ev '^[^:]+:[0-9]+: *#')"; then
  fail "manifests must verify TLS (caBundle), found insecureSkipTLSVerify:"$'\n'"${bad}"
fi

# Build with kubectl's kustomize.
kubectl="$(kubectl_bin)"
if [[ ! -x "${kubectl}" ]]; then
  log::info "building kubectl ${KUBECTL_VERSION}"
  "${REPO_ROOT}/hack/build-kubectl.sh"
fi
targets=("${DEPLOY}/base")
for d in "${DEPLOY}"/overlays/*/; do
  targets+=("${d%/}")
done
for t in "${targets[@]}"; do
  if ! out="$("${kubectl}" kustomize "${t}" 2>&1)"; then
    fail "kubectl kustomize ${t}:"$'\n'"${out}"
    continue
  fi
  images="$(sed -n 's/^ *image: *//p' <<<"${out}" | sort -u)"
  [[ "${images}" == "${IMAGE}:${version}" ]] ||
    fail "kubectl kustomize ${t}: images ${images//$'\n'/, }, want ${IMAGE}:${version}"
  if grep -qi 'insecureSkipTLSVerify' <<<"${out}"; then
    fail "kubectl kustomize ${t}: output sets insecureSkipTLSVerify"
  fi
  grep -q '^kind: APIService$' <<<"${out}" || fail "kubectl kustomize ${t}: no APIService"
  grep -q '^kind: Deployment$' <<<"${out}" || fail "kubectl kustomize ${t}: no Deployment"
  log::info "kubectl kustomize ${t}: $(grep -c '^kind:' <<<"${out}") objects"
done

if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -x hack/deploy-certs.sh hack/verify-manifests.sh || fail "shellcheck"
else
  log::warn "shellcheck not installed: skipping the shell checks"
fi

[[ "${failures}" == 0 ]] || die "${failures} manifest check(s) failed"
log::info "manifests OK (${IMAGE}:${version})"
