#!/usr/bin/env bash
# On demand (not in CI): creates 1,000 CRDs in batches and deletes them on a
# real control plane (kube-apiserver v1.36.3 and v1.37.2 with the filter,
# two peerdiscovery-apiserver replicas) and reports RSS over the run and the
# filters' relists. About ten minutes on two cores.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"
hack/build-all.sh
PEERDISCOVERY_SCALE_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -count=1 -v -timeout 60m ./test/crdchurn 2>&1 | tee "${OUTPUT_DIR}/crd-churn.log"
