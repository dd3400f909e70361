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

# Runs a committed selection of upstream's own e2e tests
# (test/conformance/selection.txt) through one kube-apiserver of the local
# control plane: every request of the suite goes to that server, so through
# an older one the newer release's APIs are reached only through the filter.
#
#   hack/conformance.sh --context v1.36.3          # on hack/local-up.sh's plane
#   hack/conformance.sh --kubeconfig K --context C --report-dir D [-- E2E_ARGS...]
#
# The suite is e2e.test of the newest release (hack/build-e2e-test.sh, built
# if missing). The plane needs its kube-controller-manager (local-up runs
# one); it has no kubelet, so when the cluster has no Node the script
# creates one stand-in Node, Ready and untainted, for the suite's "all nodes
# schedulable" check, and deletes it at exit. The stand-in is a test device
# only: it runs nothing, and artifacts/deploy never contains one.
#
# JUnit and e2e.test's output go to the report dir (default
# _output/conformance/CONTEXT). Exits with e2e.test's status.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

SELECTION="${REPO_ROOT}/test/conformance/selection.txt"
STAND_IN_NODE="peerdiscovery-conformance-stand-in"

usage() {
  sed -n '16,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  echo "Flags: --kubeconfig FILE (default _output/local-up/kubeconfig), --context NAME (required),"
  echo "       --report-dir DIR, --version V (of e2e.test; default the newest of KUBE_VERSIONS),"
  echo "       --selection FILE (default test/conformance/selection.txt), --list (print the selected tests),"
  echo "       --every-server-only (only the focus-every rules: what CI runs through every server)"
}

# selection_regexp KIND... prints the rules of the KINDs (focus-every,
# focus, skip) of the selection file as one alternation, without their
# comments.
selection_regexp() {
  local kind
  for kind in "$@"; do
    sed -n "s/^${kind}[[:space:]]\{1,\}\(.*[^[:space:]]\)[[:space:]]\{1,\}#.*$/\1/p; s/^${kind}[[:space:]]\{1,\}\([^#]*[^#[:space:]]\)[[:space:]]*$/\1/p" "${SELECTION}"
  done | awk 'BEGIN { ORS = "" } { if (NR > 1) print "|"; print "(" $0 ")" }'
}

# stand_in_node creates (or replaces) the stand-in Node and sets its status
# Ready, as a kubelet would report it.
stand_in_node() {
  local now
  now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  "${KUBECTL[@]}" delete node "${STAND_IN_NODE}" --ignore-not-found --wait=false >/dev/null
  "${KUBECTL[@]}" create -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: ${STAND_IN_NODE}
  labels:
    kubernetes.io/hostname: ${STAND_IN_NODE}
    kubernetes.io/os: linux
    kubernetes.io/arch: $(go env GOARCH)
    peerdiscovery.k8s.io/test-stand-in: "true"
  annotations:
    peerdiscovery.k8s.io/purpose: "hack/conformance.sh: stands in for a kubelet so that e2e.test starts; runs nothing"
YAML
  "${KUBECTL[@]}" patch node "${STAND_IN_NODE}" --subresource=status --type=merge -p "$(
    cat <<JSON
{"status": {
  "conditions": [{"type": "Ready", "status": "True", "reason": "StandIn", "message": "hack/conformance.sh stand-in, no kubelet",
                  "lastHeartbeatTime": "${now}", "lastTransitionTime": "${now}"}],
  "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
  "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
  "nodeInfo": {"kubeletVersion": "$("${E2E_TEST}" --version)",
               "operatingSystem": "linux", "architecture": "$(go env GOARCH)",
               "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
               "containerRuntimeVersion": "", "kubeProxyVersion": ""}
}}
JSON
  )" >/dev/null
  # Admission (TaintNodesByCondition) taints a new Node not-ready; the node
  # lifecycle controller that would lift it is not running here.
  "${KUBECTL[@]}" taint node "${STAND_IN_NODE}" node.kubernetes.io/not-ready:NoSchedule- >/dev/null
}

remove_stand_in_node() {
  "${KUBECTL[@]}" delete node "${STAND_IN_NODE}" --ignore-not-found --wait=false >/dev/null || true
}

main() {
  local kubeconfig="${OUTPUT_DIR}/local-up/kubeconfig" context="" report_dir="" version="${KUBE_VERSIONS##* }" list="" every_only=""
  local -a extra=()
  while (($# > 0)); do
    case "${1}" in
      --kubeconfig) kubeconfig="${2:?--kubeconfig needs a value}"; shift ;;
      --kubeconfig=*) kubeconfig="${1#*=}" ;;
      --context) context="${2:?--context needs a value}"; shift ;;
      --context=*) context="${1#*=}" ;;
      --report-dir) report_dir="${2:?--report-dir needs a value}"; shift ;;
      --report-dir=*) report_dir="${1#*=}" ;;
      --version) version="${2:?--version needs a value}"; shift ;;
      --version=*) version="${1#*=}" ;;
      --selection) SELECTION="${2:?--selection needs a value}"; shift ;;
      --selection=*) SELECTION="${1#*=}" ;;
      --list) list=1 ;;
      --every-server-only) every_only=1 ;;
      -h | --help) usage; exit 0 ;;
      --) shift; extra=("$@"); break ;;
      *) usage >&2; die "unknown argument ${1}" ;;
    esac
    shift
  done
  [[ -f "${SELECTION}" ]] || die "no selection file ${SELECTION}"
  local focus skip
  if [[ -n "${every_only}" ]]; then
    focus="$(selection_regexp focus-every)"
  else
    focus="$(selection_regexp focus-every focus)"
  fi
  skip="$(selection_regexp skip)"
  [[ -n "${focus}" ]] || die "${SELECTION} has no focus rule"

  "${REPO_ROOT}/hack/build-e2e-test.sh" "${version}"
  E2E_TEST="$(e2e_test_bin "${version}")"
  if [[ -n "${list}" ]]; then
    "${E2E_TEST}" --ginkgo.dry-run --ginkgo.v --ginkgo.no-color --ginkgo.focus="${focus}" --ginkgo.skip="${skip}" 2>/dev/null |
      sed -n 's/^\(\[[a-z-]*\] .*\)$/\1/p' | sed 's/ \[sig-[^]]*\]$//' | LC_ALL=C sort -u
    return 0
  fi

  [[ -n "${context}" ]] || { usage >&2; die "--context is required"; }
  [[ -f "${kubeconfig}" ]] || die "no kubeconfig ${kubeconfig} (start hack/local-up.sh first)"
  "${REPO_ROOT}/hack/build-kubectl.sh"
  KUBECTL=("$(kubectl_bin)" --kubeconfig "${kubeconfig}" --context "${context}")
  report_dir="${report_dir:-${OUTPUT_DIR}/conformance/${context}}"
  # Only what this script writes there: the folder may be the user's.
  mkdir -p "${report_dir}"
  rm -f "${report_dir}/junit_01.xml" "${report_dir}/e2e.log"

  # A cluster with Nodes of its own runs the suite on them: a stand-in
  # there could be picked by a real scheduler.
  local nodes
  nodes="$("${KUBECTL[@]}" get nodes -o name | { grep -vx "node/${STAND_IN_NODE}" || true; } | wc -l)"
  if ((nodes == 0)); then
    stand_in_node
    trap remove_stand_in_node EXIT
  else
    log::info "the cluster has ${nodes} Node(s): no stand-in Node"
  fi
  log::info "running e2e.test ${version} through context ${context}; reports in ${report_dir}"
  local rc=0 start
  start="$(date +%s)"
  "${E2E_TEST}" \
    --kubeconfig="${kubeconfig}" --context="${context}" \
    --provider=skeleton \
    --report-dir="${report_dir}" \
    --ginkgo.focus="${focus}" --ginkgo.skip="${skip}" \
    --ginkgo.no-color --ginkgo.timeout=2h \
    ${extra[@]+"${extra[@]}"} >"${report_dir}/e2e.log" 2>&1 || rc=$?
  grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!)|^  \[FAIL\]' "${report_dir}/e2e.log" >&2 || true
  log::info "e2e.test through ${context}: exit ${rc} after $(elapsed_since "${start}") (log: ${report_dir}/e2e.log)"
  return "${rc}"
}

main "$@"
