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

# Regenerates deepcopy, conversion, defaults, OpenAPI, clientset, listers,
# informers and apply configurations with k8s.io/code-generator (the version
# pinned in go.mod).
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_ROOT="${1:-${REPO_ROOT}}"
cd "${REPO_ROOT}"
THIS_PKG="sigs.k8s.io/peerdiscovery"
# go list -m reports no directory for a module not yet in the module cache
# (a fresh machine): download it first.
go mod download k8s.io/code-generator
CODEGEN_PKG="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
if [[ ! -f "${CODEGEN_PKG}/kube_codegen.sh" ]]; then
    echo "k8s.io/code-generator not found in the module cache (go list -m: '${CODEGEN_PKG}')" >&2
    exit 1
fi
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

kube::codegen::gen_helpers \
    --boilerplate "${REPO_ROOT}/hack/boilerplate.go.txt" \
    "${REPO_ROOT}/pkg/apis"

# Known rule violations (ours: etag/apis JSON names kept for readability)
# are recorded in hack/api-rules-violations.list; verify-codegen fails on new ones.
kube::codegen::gen_openapi \
    --output-dir "${OUT_ROOT}/pkg/generated/openapi" \
    --output-pkg "${THIS_PKG}/pkg/generated/openapi" \
    --report-filename "${REPO_ROOT}/hack/api-rules-violations.list" \
    --output-model-name-file "zz_generated.model_name.go" \
    --update-report \
    --extra-pkgs "k8s.io/api/apidiscovery/v2" \
    --boilerplate "${REPO_ROOT}/hack/boilerplate.go.txt" \
    "${REPO_ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema <(go run "${THIS_PKG}/pkg/generated/openapi/cmd/models-schema") \
    --output-dir "${OUT_ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${REPO_ROOT}/hack/boilerplate.go.txt" \
    "${REPO_ROOT}/pkg/apis"
