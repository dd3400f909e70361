// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// Package monitoring checks artifacts/monitoring/ with Prometheus's own
// rule and PromQL parsers (github.com/prometheus/prometheus at the release
// hack/build-prometheus.sh builds promtool from): the alerts and every
// dashboard query parse, and metrics.txt records exactly the metrics they
// name, which test/e2e then finds on a real control plane. It is a module
// of its own so that the main module does not require Prometheus (and its
// newer gRPC, OpenTelemetry and client_golang). hack/verify-monitoring.sh
// runs it with promtool's checks.
package monitoring
