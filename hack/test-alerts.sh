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

# On demand (not in CI): test/alerts makes every alert of
# artifacts/monitoring/alerts.yaml fire and resolve on a real control plane
# (kube-apiserver v1.36.3 and v1.37.2 with the filter, two
# peerdiscovery-apiserver replicas, kube-controller-manager), watched by a
# real Prometheus ${PROMETHEUS_VERSION} with the shipped scrape jobs, RBAC
# and rules (each `for` divided by 10, as the plane divides the tombstone,
# and the error-budget burn alerts' rate windows too),
# and prints the table of faults, times to fire and times to resolve (also
# in the run folder, prometheus/report.md). About 26 minutes on two cores,
# plus the Prometheus build the first time.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
hack/build-prometheus.sh prometheus
PEERDISCOVERY_ALERTS_E2E=1 PEERDISCOVERY_PROMETHEUS="$(prometheus_bin prometheus)" PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -count=1 -v -timeout 60m ./test/alerts 2>&1 | tee "${OUTPUT_DIR}/alerts-e2e.log"
