// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// kubectl-peerdiscovery is a kubectl plugin: copy it onto PATH and run
// `kubectl peerdiscovery status`, `explain` or `drain`.
package main

import (
	"context"
	"fmt"
	"os"

	"sigs.k8s.io/peerdiscovery/pkg/cmd/plugin"
)

func main() {
	cmd := plugin.NewCommand(plugin.Streams{Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
