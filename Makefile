# Usual targets; the README's two commands are hack/local-up.sh and hack/test.sh.
.PHONY: all build test unit verify codegen local-up binaries clean

all: build

build:
	go build -o _output/bin/peerdiscovery-apiserver ./cmd/peerdiscovery-apiserver

binaries:
	hack/build-all.sh

test:
	hack/test.sh

unit:
	go test -race ./pkg/...

verify:
	gofmt -l cmd pkg test | (! grep .)
	go vet ./...
	hack/verify-codegen.sh

codegen:
	hack/update-codegen.sh

local-up:
	hack/local-up.sh

clean:
	rm -rf _output
