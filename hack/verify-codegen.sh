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

# Fails when generated code (or the API rule violation list) is not what
# hack/update-codegen.sh produces from the current API types.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

# Generate into a copy of the tree so the working tree is never touched
# (files deleted in the working tree but still in the index are skipped).
mkdir -p "${TMP}/tree"
( cd "${REPO_ROOT}" && git ls-files --cached --others --exclude-standard -z \
  | while IFS= read -r -d '' f; do [[ -f "${f}" ]] && printf '%s\0' "${f}"; done \
  | xargs -0 cp --parents -t "${TMP}/tree" )
( cd "${TMP}/tree" && ./hack/update-codegen.sh >"${TMP}/codegen.log" 2>&1 ) || { cat "${TMP}/codegen.log"; exit 1; }

status=0
for d in pkg/apis pkg/generated hack/api-rules-violations.list; do
    if ! diff -Naupr "${REPO_ROOT}/${d}" "${TMP}/tree/${d}"; then
        status=1
    fi
done
if [[ ${status} -ne 0 ]]; then
    echo "generated code is out of date: run hack/update-codegen.sh" >&2
    exit 1
fi
echo "generated code is up to date"
