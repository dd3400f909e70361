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

// Command peerdiscovery-apiserver serves peerdiscovery.k8s.io.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"sigs.k8s.io/peerdiscovery/pkg/cmd/server"
)

// healthCheck is the HTTP/2 connection health check of this process's
// clients, unless the environment sets it: its informers watch through one
// kube-apiserver at a time, and one that stops answering (frozen, cut off)
// would freeze its view of every peer for client-go's default 30 s + 15 s.
// With 5 s + 3 s a stuck connection is dropped, and the watches resume on
// another server, before a registration Lease (10 s) can seem to lapse.
var healthCheck = map[string]string{
	"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "5",
	"HTTP2_PING_TIMEOUT_SECONDS":      "3",
}

func main() {
	for k, v := range healthCheck {
		if _, set := os.LookupEnv(k); !set {
			_ = os.Setenv(k, v)
		}
	}
	ctx := genericapiserver.SetupSignalContext()
	cmd := server.NewCommand(ctx, server.NewOptions(), server.Run)
	os.Exit(cli.Run(cmd))
}
