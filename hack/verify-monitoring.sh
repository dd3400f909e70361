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

# Checks artifacts/monitoring/ with Prometheus's own code, without a
# cluster, in two parts:
#   parser (the test command): hack/monitoring (go test) reads alerts.yaml
#     with Prometheus' rule parser (schema, PromQL, templates) and
#     dashboard.json's queries with its PromQL parser, checks that every
#     alert is unit-tested in alerts_test.yaml, and that metrics.txt names
#     exactly the metrics of the alerts and the dashboard (test/e2e finds
#     each on a real control plane);
#   promtool (on demand: its build is 311 CPU seconds of a cold run, "CI's
#     time" in docs/testing.md):
#     - promtool check rules alerts.yaml, lint findings fatal;
#     - promtool test rules alerts_test.yaml (every alert on synthetic
#       series: quiet, firing with its labels and annotations, quiet again);
#     - promtool check config --syntax-only prometheus-scrape.yaml.
# promtool is built once by hack/build-prometheus.sh and cached.
# test/alerts (on demand) runs the rules in a real Prometheus on a real
# control plane.
#
# Usage: hack/verify-monitoring.sh [parser|promtool]...   (default: both)
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
dir=artifacts/monitoring

verify_promtool() {
  local promtool
  promtool="$(prometheus_bin promtool)"
  # A stage of hack/test.sh's table: cached or built.
  stage::build "promtool ${PROMETHEUS_VERSION}" "${promtool}" "${REPO_ROOT}/hack/build-prometheus.sh" promtool
  "${promtool}" check rules --lint=all --lint-fatal "${dir}/alerts.yaml"
  "${promtool}" test rules "${dir}/alerts_test.yaml"
  "${promtool}" check config --syntax-only "${dir}/prometheus-scrape.yaml"
}

# Static, -trimpath and promtool's tags, as hack/build-prometheus.sh builds
# promtool from the same module versions: after promtool's build, its
# compile of Prometheus' packages serves these tests (2 CPU seconds, in an
# empty cache, without vet).
verify_parser() {
  (cd hack/monitoring && CGO_ENABLED=0 GOFLAGS="${GOFLAGS} -mod=readonly -trimpath" go test -count=1 -tags "${PROMETHEUS_BUILD_TAGS}" ./...)
}

(($# > 0)) || set -- promtool parser
for part in "$@"; do
  case "${part}" in
  parser | promtool) "verify_${part}" ;;
  *) die "unknown part ${part} (usage: hack/verify-monitoring.sh [parser|promtool]...)" ;;
  esac
done
log::info "monitoring artifacts verified: $*"
