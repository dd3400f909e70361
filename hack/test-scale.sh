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

# On demand (in the test command until 2026-12-06, moved out for its cold
# budget: docs/testing.md, "CI's time"): the pure compute at 5 peers x 5,000
# GVRs (test/scale: a view's time and memory) and the store's memory bounds
# (pkg/registry/memstore TestMemory). About 2.5 minutes on two cores.
#
# Static (CGO_ENABLED=0, -trimpath), as the release builds: the libraries
# compiled for kube-apiserver and peerdiscovery-apiserver serve these tests
# too. No race detector, which multiplies memory and time (under it they
# skip, so that go vet -race ./... vets them: -vet=off here).
#
# Usage: hack/test-scale.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
mkdir -p "${OUTPUT_DIR}"
CGO_ENABLED=0 go test -trimpath -vet=off -count=1 -timeout 20m -v -run 'TestScale|TestMemory' ./test/scale ./pkg/registry/memstore 2>&1 |
  tee "${OUTPUT_DIR}/scale-test.log" | grep -E '^(--- |ok|FAIL|PASS)|scale:|heap'
exit "${PIPESTATUS[0]}"
