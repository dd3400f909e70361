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
