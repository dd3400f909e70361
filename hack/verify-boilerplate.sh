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

# Fails when a hand-written source file (Go, shell, Makefile, Dockerfile)
# lacks the license header of hack/boilerplate.go.txt. Generated code gets
# it from code-generator (hack/update-codegen.sh passes the same file).
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
marker="$(sed -n 1p hack/boilerplate.go.txt | sed "s#^// ##")"
missing=()
while IFS= read -r -d '' f; do
  [[ -f "${f}" ]] || continue
  case "${f}" in
    *.go | *.sh | Makefile | */Makefile | Dockerfile | */Dockerfile | .ci/run) ;;
    *) continue ;;
  esac
  # Within the first 25 lines: after a shebang or a //go:build line.
  head -n 25 "${f}" | grep -qF "${marker}" || missing+=("${f}")
done < <(git ls-files --cached --others --exclude-standard -z)
if (( ${#missing[@]} > 0 )); then
  printf 'missing the license header of hack/boilerplate.go.txt:\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "license headers present"
