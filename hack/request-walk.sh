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

# On demand (not in CI): the walk of one request through the filter, as a
# reader follows it. It traces TestRequestWalk (pkg/filter) with dlv (built
# from the Go module proxy into _output/bin), which records every call of
# peerdiscovery's functions, and prints the calls made for the traced
# request, in order, with their files and how many times each file is
# entered (hack/request-walk). It fails when a file is entered more than
# twice (docs/design.md, "Data flow", step 6). About 25 s (dlv stops at
# every traced call, the setup's too), and 24 s more to build dlv once.
#
#   hack/request-walk.sh [PATH [STATUS]]
#
# PATH is the request's path (default: a widget, proxied to the peer);
# STATUS the status it must get (default 200). The setup is the filter
# benchmark's: this server serves pods and apps, a TLS peer serves
# example.com/v1 widgets.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

path="${1:-/apis/example.com/v1/namespaces/ns1/widgets/w1}"
code="${2:-200}"
dlv="${BIN_DIR}/dlv-${DLV_VERSION}/dlv"
if [[ ! -x "${dlv}" ]]; then
  log::info "dlv ${DLV_VERSION}: building"
  mkdir -p "$(dirname "${dlv}")"
  GOBIN="$(dirname "${dlv}")" GOFLAGS= go install "github.com/go-delve/delve/cmd/dlv@${DLV_VERSION}"
fi
trace="${TMP_DIR}/request-walk.trace"
mkdir -p "${TMP_DIR}"
log::info "tracing ${path}"
# dlv builds the test itself, without optimizations or inlining, so every
# call is seen.
(cd pkg/filter && PEERDISCOVERY_REQUEST_WALK="${path}" PEERDISCOVERY_REQUEST_WALK_CODE="${code}" GOFLAGS= \
  "${dlv}" trace --test 'sigs.k8s.io/peerdiscovery/pkg/(filter|routing)' -- -test.run '^TestRequestWalk$') >"${trace}" 2>&1 ||
  die "the traced test failed: ${trace}"
grep -q '^PASS' "${trace}" || die "the traced test did not pass: ${trace}"
go run ./hack/request-walk -root . -max-entries 2 "${trace}"
