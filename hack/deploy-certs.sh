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

# Issues the serving certificate of peerdiscovery-apiserver with openssl and
# installs it:
#   1. a CA of its own (kept in --dir, reused on every later run; a new one
#      only with --new-ca), EC P-256, 10 years;
#   2. a serving certificate signed by it for the Service
#      (peerdiscovery-apiserver.peerdiscovery.svc and .svc.cluster.local),
#      1 year, renewed when it expires within 30 days or with --renew;
#   3. the APIService v1alpha1.peerdiscovery.k8s.io spec.caBundle set to the
#      CA (after --new-ca: the new and the previous CA, so the aggregator
#      trusts the replicas still serving the old certificate until the
#      kubelet swaps the Secret's files);
#   4. the Secret peerdiscovery/peerdiscovery-apiserver-tls created or
#      updated (kubectl create secret tls --dry-run=client | kubectl apply).
# The replicas reload a changed certificate file by themselves; no restart.
# insecureSkipTLSVerify is never used.
#
# Apply the manifests first (the namespace and the APIService must exist):
#   kubectl apply -k artifacts/deploy/overlays/ha
#   hack/deploy-certs.sh [--kubeconfig FILE] [--context NAME]
#
# Rerun it after a server-side apply of the manifests (which resets
# caBundle to the manifests' empty placeholder); a client-side
# `kubectl apply -k` keeps it. With cert-manager, use
# artifacts/deploy/components/cert-manager instead of this script.
#
# Options:
#   --kubeconfig FILE, --context NAME   passed to every kubectl call
#   --dir DIR        where the CA and certificate are kept
#                    (default: _output/deploy-certs; the CA key is in it:
#                    keep it private)
#   --renew          issue a new serving certificate even if the current
#                    one is still valid
#   --new-ca         make a new CA (implies --renew)
#   --days N         serving certificate lifetime (default 365)
# Environment: KUBECTL (default: _output/bin/kubectl-v1.37.2/kubectl when
# built, else kubectl on PATH).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

NAMESPACE="peerdiscovery"
SERVICE="peerdiscovery-apiserver"
SECRET="peerdiscovery-apiserver-tls"
APISERVICE="v1alpha1.peerdiscovery.k8s.io"

usage() {
  sed -n '16,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

kubectl_args=()
dir="${OUTPUT_DIR}/deploy-certs"
renew=0
new_ca=0
days=365

while [[ $# -gt 0 ]]; do
  case "${1}" in
    --kubeconfig | --context)
      [[ $# -ge 2 ]] || die "${1} needs a value"
      kubectl_args+=("${1}=${2}")
      shift 2
      ;;
    --kubeconfig=* | --context=*)
      kubectl_args+=("${1}")
      shift
      ;;
    --dir)
      [[ $# -ge 2 ]] || die "--dir needs a value"
      dir="${2}"
      shift 2
      ;;
    --dir=*)
      dir="${1#--dir=}"
      shift
      ;;
    --days)
      [[ $# -ge 2 ]] || die "--days needs a value"
      days="${2}"
      shift 2
      ;;
    --days=*)
      days="${1#--days=}"
      shift
      ;;
    --renew)
      renew=1
      shift
      ;;
    --new-ca)
      new_ca=1
      renew=1
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      die "unknown argument: ${1} (see --help)"
      ;;
  esac
done
[[ "${days}" =~ ^[1-9][0-9]*$ ]] || die "--days must be a positive number: ${days}"

if [[ -z "${KUBECTL:-}" ]]; then
  if [[ -x "$(kubectl_bin)" ]]; then
    KUBECTL="$(kubectl_bin)"
  else
    KUBECTL="kubectl"
  fi
fi
require_cmd openssl "${KUBECTL}"

kc() { "${KUBECTL}" ${kubectl_args[@]+"${kubectl_args[@]}"} "$@"; }

# Fail early, with a hint, when the manifests are not applied.
kc get namespace "${NAMESPACE}" >/dev/null ||
  die "namespace ${NAMESPACE} not found: apply the manifests first (kubectl apply -k artifacts/deploy/overlays/ha)"
kc get apiservice "${APISERVICE}" >/dev/null ||
  die "APIService ${APISERVICE} not found: apply the manifests first (kubectl apply -k artifacts/deploy/overlays/ha)"

mkdir -p "${dir}"
chmod 700 "${dir}"
ca_crt="${dir}/ca.crt"
ca_key="${dir}/ca.key"
tls_crt="${dir}/tls.crt"
tls_key="${dir}/tls.key"
bundle="${dir}/ca-bundle.crt"

# The CA.
if [[ "${new_ca}" == 1 || ! -s "${ca_crt}" || ! -s "${ca_key}" ]]; then
  previous=""
  if [[ -s "${ca_crt}" ]]; then
    previous="$(cat "${ca_crt}")"
  fi
  log::info "generating a new CA in ${dir}"
  (
    umask 077
    openssl req -x509 -new -nodes -sha256 -days 3650 \
      -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -keyout "${ca_key}" -out "${ca_crt}" \
      -subj "/CN=peerdiscovery-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  )
  # The bundle trusts the previous CA too until the next rotation.
  {
    cat "${ca_crt}"
    if [[ -n "${previous}" ]]; then
      printf '%s\n' "${previous}"
    fi
  } >"${bundle}"
  renew=1
elif [[ ! -s "${bundle}" ]]; then
  cp "${ca_crt}" "${bundle}"
fi

# The serving certificate.
if [[ "${renew}" == 0 && -s "${tls_crt}" && -s "${tls_key}" ]] &&
  openssl verify -CAfile "${ca_crt}" "${tls_crt}" >/dev/null 2>&1 &&
  openssl x509 -checkend $((30 * 24 * 3600)) -noout -in "${tls_crt}" >/dev/null; then
  log::info "serving certificate ${tls_crt} is valid for 30 more days: reusing it (--renew to replace it)"
else
  log::info "issuing the serving certificate for ${SERVICE}.${NAMESPACE}.svc (${days} days)"
  ext="$(mktemp)"
  csr="$(mktemp)"
  trap 'rm -f "${ext}" "${csr}"' EXIT
  cat >"${ext}" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:${SERVICE},DNS:${SERVICE}.${NAMESPACE},DNS:${SERVICE}.${NAMESPACE}.svc,DNS:${SERVICE}.${NAMESPACE}.svc.cluster.local
EOF
  (
    umask 077
    openssl req -new -nodes -sha256 \
      -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
      -keyout "${tls_key}" -out "${csr}" \
      -subj "/CN=${SERVICE}.${NAMESPACE}.svc" 2>/dev/null
  )
  openssl x509 -req -sha256 -days "${days}" -in "${csr}" \
    -CA "${ca_crt}" -CAkey "${ca_key}" -set_serial "0x$(openssl rand -hex 16)" \
    -extfile "${ext}" -out "${tls_crt}" 2>/dev/null
fi
openssl verify -CAfile "${ca_crt}" "${tls_crt}" >/dev/null ||
  die "${tls_crt} does not verify against ${ca_crt}"

# The caBundle first, so the aggregator already trusts the new CA when the
# replicas start serving a certificate it signed.
ca_bundle="$(base64 <"${bundle}" | tr -d '\n')"
log::info "setting the caBundle of APIService ${APISERVICE}"
kc patch apiservice "${APISERVICE}" --type=merge \
  -p "{\"spec\":{\"caBundle\":\"${ca_bundle}\",\"insecureSkipTLSVerify\":false}}" >/dev/null

log::info "applying Secret ${NAMESPACE}/${SECRET}"
kc create secret tls "${SECRET}" --namespace "${NAMESPACE}" \
  --cert "${tls_crt}" --key "${tls_key}" --dry-run=client -o yaml |
  kc label --local -f - -o yaml app.kubernetes.io/name=peerdiscovery |
  kc apply -f - >/dev/null

check="${KUBECTL}"
if [[ ${#kubectl_args[@]} -gt 0 ]]; then
  check+=" ${kubectl_args[*]}"
fi
log::info "done: the replicas pick up the certificate when the kubelet updates the Secret volume (about a minute);" \
  "check with: ${check} get apiservice ${APISERVICE}"
