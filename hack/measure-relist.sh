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

# On demand (not in CI): what one relist of a filter's routing caches costs
# at 5 peers x 5,000 GVRs on a real kube-apiserver v1.37.2 (test/relist):
# bytes, time, and CPU of the kube-apiserver and of the replica. About five
# minutes on two cores. RELIST_WATCHLIST=false measures client-go's LIST
# path instead of its default watch-list.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
hack/build-etcd.sh
hack/build-kubectl.sh
hack/build-kube-apiserver.sh v1.37.2
PEERDISCOVERY_SCALE_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -count=1 -v -timeout 30m ./test/relist 2>&1 | tee "${OUTPUT_DIR}/measure-relist.log"
