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

# On demand (not in CI): creates 1,000 CRDs in batches and deletes them on a
# real control plane (kube-apiserver v1.36.3 and v1.37.2 with the filter,
# two peerdiscovery-apiserver replicas) and reports RSS over the run and the
# filters' relists. About ten minutes on two cores.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
hack/build-all.sh
PEERDISCOVERY_SCALE_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -count=1 -v -timeout 60m ./test/crdchurn 2>&1 | tee "${OUTPUT_DIR}/crd-churn.log"
