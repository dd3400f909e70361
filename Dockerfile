# syntax=docker/dockerfile:1
# peerdiscovery-apiserver: a static binary on a distroless, non-root base.
# Build: docker build --build-arg VERSION="$(cat VERSION)" -t registry.k8s.io/peerdiscovery/peerdiscovery-apiserver:"$(cat VERSION)" .
# The VERSION default below, the VERSION file and the image tag in
# artifacts/deploy/base/kustomization.yaml agree (hack/verify-manifests.sh).

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG VERSION=v0.1.0
ARG GIT_COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w \
        -X k8s.io/component-base/version.gitVersion=${VERSION} \
        -X k8s.io/component-base/version.gitCommit=${GIT_COMMIT} \
        -X k8s.io/component-base/version.gitTreeState=clean" \
      -o /out/peerdiscovery-apiserver ./cmd/peerdiscovery-apiserver

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/peerdiscovery-apiserver /peerdiscovery-apiserver
USER 65532:65532
EXPOSE 6443
ENTRYPOINT ["/peerdiscovery-apiserver"]
