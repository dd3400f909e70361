# Usual targets; the README's two commands are hack/local-up.sh and hack/test.sh.
.PHONY: all build plugin test unit verify codegen local-up binaries clean

all: build

build: plugin
	go build -o _output/bin/peerdiscovery-apiserver ./cmd/peerdiscovery-apiserver

# The kubectl plugin: copy _output/bin/kubectl-plugins/kubectl-peerdiscovery
# onto PATH, then `kubectl peerdiscovery status`.
plugin:
	go build -o _output/bin/kubectl-plugins/kubectl-peerdiscovery ./cmd/kubectl-peerdiscovery

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
