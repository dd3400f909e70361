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

# Smoke test of a built kube-apiserver with the peerdiscovery filter: starts
# the built etcd and kube-apiserver on free 127.0.0.1 ports, waits for
# /readyz, and checks that the filter's readyz check and post-start hook are
# registered (and upstream's built-in peer proxy is not). Everything it
# starts is stopped on exit; its scratch folder (_output/tmp/smoke-*) is
# removed unless KEEP_TMP=1.
#
# Builds what is missing first (cached; see hack/build-*.sh).
#
# Usage: hack/smoke-kube-apiserver.sh [VERSION...]   (default: ${KUBE_VERSIONS})
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source-path=SCRIPTDIR source=lib/testing.sh
source "${HACK_DIR}/lib/testing.sh"

require_cmd curl openssl

WORK=""
KAS_PID=""
ETCD_PID=""

cleanup() {
  local rc=$?
  [[ -n "${KAS_PID}" ]] && stop_pid "${KAS_PID}" kube-apiserver
  [[ -n "${ETCD_PID}" ]] && stop_pid "${ETCD_PID}" etcd
  if [[ -n "${WORK}" && -d "${WORK}" ]]; then
    if ((rc != 0)); then
      for f in "${WORK}/etcd.log" "${WORK}/kube-apiserver.log"; do
        [[ -f "${f}" ]] || continue
        log::error "last lines of ${f}:"
        tail -n 30 "${f}" >&2 || true
        if grep -q '^panic: ' "${f}"; then
          log::error "${f} has a panic:"
          grep -A3 '^panic: ' "${f}" >&2 || true
        fi
      done
    fi
    if [[ -n "${KEEP_TMP:-}" ]]; then
      log::info "kept ${WORK}"
    else
      rm -rf "${WORK}"
    fi
  fi
  KAS_PID=""
  ETCD_PID=""
  WORK=""
  return "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# fail MESSAGE: fail the smoke test.
fail() { die "smoke: ${*}"; }

smoke_one() {
  local version="${1}"
  local kas etcd_client etcd_peer port token certs cacert url out code
  kas="$(kube_apiserver_bin "${version}")"

  mkdir -p "${TMP_DIR}"
  WORK="$(mktemp -d "${TMP_DIR}/smoke-${version}-XXXXXX")"
  certs="${WORK}/certs"
  mkdir -p "${certs}"

  log::info "smoke ${version}: --version"
  out="$("${kas}" --version)"
  echo "${out}"
  [[ "${out}" == "Kubernetes ${version}" ]] || fail "--version printed '${out}', want 'Kubernetes ${version}'"

  log::info "smoke ${version}: explicitly enabling the built-in peer proxy must be refused"
  if out="$("${kas}" --feature-gates=UnknownVersionInteroperabilityProxy=true --version 2>&1)"; then
    fail "--feature-gates=UnknownVersionInteroperabilityProxy=true was accepted: ${out}"
  fi
  echo "${out}" | tail -n1

  # Service account keys and an admin token.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${WORK}/sa.key" 2>/dev/null
  token="$(openssl rand -hex 24)"
  echo "${token},smoke-admin,smoke-admin-uid,system:masters" >"${WORK}/tokens.csv"

  etcd_client="$(free_port)"
  etcd_peer="$(free_port)"
  port="$(free_port)"

  log::info "smoke ${version}: starting etcd ${ETCD_VERSION} on 127.0.0.1:${etcd_client}"
  start_etcd "${WORK}/etcd" "${etcd_client}" "${etcd_peer}" "${WORK}/etcd.log"
  etcd_up() {
    pid_alive "${ETCD_PID}" || return 125
    etcd_healthy "${etcd_client}"
  }
  wait_until 60 "etcd to be healthy" etcd_up || fail "etcd did not become healthy"

  log::info "smoke ${version}: starting kube-apiserver on 127.0.0.1:${port}"
  "${kas}" \
    --etcd-servers="http://127.0.0.1:${etcd_client}" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="${port}" \
    --cert-dir="${certs}" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --endpoint-reconciler-type=none \
    --authorization-mode=RBAC \
    --token-auth-file="${WORK}/tokens.csv" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="${WORK}/sa.key" \
    --service-account-signing-key-file="${WORK}/sa.key" \
    --peer-advertise-ip=127.0.0.1 \
    --peer-advertise-port="${port}" \
    >"${WORK}/kube-apiserver.log" 2>&1 &
  KAS_PID=$!

  # The serving certificate is self-signed for 127.0.0.1/localhost and
  # written to --cert-dir; every request below verifies it.
  cacert="${certs}/apiserver.crt"
  url="https://127.0.0.1:${port}"
  kas_get() {
    curl -sS --max-time 10 --cacert "${cacert}" -H "Authorization: Bearer ${token}" \
      -o "${WORK}/body" -w '%{http_code}' "${url}${1}"
  }
  kas_ready() {
    pid_alive "${KAS_PID}" || return 125
    [[ -f "${cacert}" ]] || return 1
    [[ "$(kas_get '/readyz?verbose')" == "200" ]]
  }
  wait_until 180 "kube-apiserver /readyz" kas_ready || {
    pid_alive "${KAS_PID}" || fail "kube-apiserver exited"
    [[ -f "${WORK}/body" ]] && cat "${WORK}/body" >&2
    fail "kube-apiserver did not become ready"
  }

  log::info "smoke ${version}: GET /readyz?verbose"
  code="$(kas_get '/readyz?verbose')"
  out="$(cat "${WORK}/body")"
  echo "${out}"
  [[ "${code}" == "200" ]] || fail "/readyz returned ${code}"
  grep -qx '\[+\]peerdiscovery-filter ok' <<<"${out}" || fail "/readyz does not list peerdiscovery-filter"
  grep -qx '\[+\]poststarthook/peerdiscovery-filter ok' <<<"${out}" ||
    fail "/readyz does not list poststarthook/peerdiscovery-filter"
  if grep -q 'peer-endpoint-reconciler' <<<"${out}"; then
    fail "upstream's peer endpoint reconciler runs: UnknownVersionInteroperabilityProxy is on"
  fi

  log::info "smoke ${version}: GET /version"
  code="$(kas_get /version)"
  out="$(cat "${WORK}/body")"
  echo "${out}"
  [[ "${code}" == "200" ]] || fail "/version returned ${code}"
  grep -q "\"gitVersion\": \"${version}\"" <<<"${out}" || fail "/version does not report ${version}"

  if [[ -x "$(kubectl_bin)" ]]; then
    log::info "smoke ${version}: kubectl ${KUBECTL_VERSION}"
    cat >"${WORK}/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster:
    server: ${url}
    certificate-authority: ${cacert}
users:
- name: smoke-admin
  user:
    token: ${token}
contexts:
- name: smoke
  context: {cluster: smoke, user: smoke-admin}
current-context: smoke
EOF
    "$(kubectl_bin)" --kubeconfig="${WORK}/kubeconfig" version
    "$(kubectl_bin)" --kubeconfig="${WORK}/kubeconfig" get namespaces
  fi

  log::info "smoke ${version}: PASS"
  cleanup
}

main() {
  local -a versions
  mapfile -t versions < <(versions_or "${KUBE_VERSIONS}" "$@")
  "${HACK_DIR}/build-etcd.sh"
  "${HACK_DIR}/build-kube-apiserver.sh" "${versions[@]}"
  local v
  for v in "${versions[@]}"; do
    smoke_one "${v}"
  done
}

main "$@"
