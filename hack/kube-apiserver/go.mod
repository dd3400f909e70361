// This go.mod only fences hack/kube-apiserver off from the main module, so
// that `go build ./...` and `go mod tidy` there never see k8s.io/kubernetes.
// The sources are built by hack/build-kube-apiserver.sh in a generated
// wrapper module (_output/build/kube-apiserver-VERSION) that requires
// k8s.io/kubernetes at that release.
module sigs.k8s.io/peerdiscovery/hack/kube-apiserver

go 1.26.0
