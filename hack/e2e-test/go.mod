// This go.mod only fences hack/e2e-test off from the main module, so that
// `go build ./...` and `go mod tidy` there never see k8s.io/kubernetes. The
// test is built by hack/build-e2e-test.sh in a generated wrapper module
// (_output/build/e2e-test-VERSION) that requires k8s.io/kubernetes at that
// release.
module sigs.k8s.io/peerdiscovery/hack/e2e-test

go 1.26.0
