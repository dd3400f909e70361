#!/usr/bin/env bash
# Builds everything the local control plane and the tests run, cached under
# _output/ by version: etcd, kubectl, kube-apiserver (every version in
# KUBE_VERSIONS, with the filter) and peerdiscovery-apiserver.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

"${REPO_ROOT}/hack/build-etcd.sh"
"${REPO_ROOT}/hack/build-kubectl.sh"
for v in ${KUBE_VERSIONS}; do
  "${REPO_ROOT}/hack/build-kube-apiserver.sh" "${v}"
done
log::info "building peerdiscovery-apiserver"
( cd "${REPO_ROOT}" && go build -o "${BIN_DIR}/peerdiscovery-apiserver" ./cmd/peerdiscovery-apiserver )
