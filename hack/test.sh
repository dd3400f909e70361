#!/usr/bin/env bash
# Runs every test: static checks, generated-code check, unit and
# integration tests with the race detector, and the end-to-end suites on a
# real local mixed-version control plane (test/conformance among them:
# upstream's own e2e tests through each kube-apiserver). This is the README's test command
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

step "verify deploy manifests"
hack/verify-manifests.sh

step "unit tests (race detector)"
go test -race -timeout 20m ./pkg/... ./cmd/... 2>&1 | tee "${OUTPUT_DIR}/unit-test.log"

step "scale tests: 5 peers x 5,000 GVRs (no race detector, which multiplies memory and time)"
go test -count=1 -timeout 20m -v -run 'TestScale|TestMemory' ./test/scale ./pkg/registry/memstore 2>&1 \
  | tee "${OUTPUT_DIR}/scale-test.log" | grep -E '^(--- |ok|FAIL|PASS)|scale:|heap'

step "test dependencies (the Kubernetes Python client)"
hack/install-test-deps.sh

step "integration and end-to-end tests on real binaries (race detector)"
# These packages start real etcd and kube-apiservers from _output/bin in
# network namespaces of their own; PEERDISCOVERY_E2E=1 turns them on. One
# package at a time: each runs a control plane on the 2 cores.
PEERDISCOVERY_E2E=1 PEERDISCOVERY_OUTPUT_DIR="${OUTPUT_DIR}" \
  go test -race -p 1 -timeout 60m ./test/... 2>&1 | tee "${OUTPUT_DIR}/e2e-test.log"

log::info "all tests passed in $(( $(date +%s) - start ))s"
