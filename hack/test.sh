#!/usr/bin/env bash
# Runs every test: static checks, generated-code check, unit and
# integration tests with the race detector, and the end-to-end suite on a
# real local mixed-version control plane. This is the README's test command
# and what .ci/run calls. Binaries are cached under _output/.
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "${REPO_ROOT}"

step() { log::info "=== $*"; }
start=$(date +%s)

step "gofmt"
unformatted="$(gofmt -l cmd pkg test hack 2>/dev/null || true)"
[[ -z "${unformatted}" ]] || die "gofmt needed on: ${unformatted}"

step "go vet"
go vet ./...

step "verify generated code"
hack/verify-codegen.sh

step "build real binaries (cached)"
hack/build-all.sh

step "unit and integration tests (race detector)"
# The integration and end-to-end packages start real etcd and
# kube-apiservers from _output/bin; PEERDISCOVERY_E2E=1 turns them on.
PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -race -timeout 45m ./... 2>&1 | tee "${OUTPUT_DIR}/test.log"

log::info "all tests passed in $(( $(date +%s) - start ))s"
