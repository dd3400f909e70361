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

# Usual targets, each a hack/ script (or a plain go build); the README's two
# commands are hack/local-up.sh and hack/test.sh.
.PHONY: all build plugin test unit verify codegen local-up local-up-nodes images binaries clean

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
	hack/test-unit.sh

verify:
	hack/verify.sh

codegen:
	hack/update-codegen.sh

local-up:
	hack/local-up.sh

# The same plane on nodes: kubelets, static pods, the extension as a Deployment.
local-up-nodes:
	hack/local-up.sh --nodes

# OCI image archives under _output/images (no container daemon needed).
images:
	hack/build-images.sh

clean:
	rm -rf _output
