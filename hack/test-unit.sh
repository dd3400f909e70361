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

# The unit tests, with the race detector (hack/test.sh's step, `make unit`);
# the log goes to _output/unit-test.log.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
mkdir -p "${OUTPUT_DIR}"
go test -race -timeout 20m ./internal/... ./pkg/... ./cmd/... 2>&1 | tee "${OUTPUT_DIR}/unit-test.log"
