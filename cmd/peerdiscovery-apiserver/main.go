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

// defaultClientHealthCheck gives this process's clients an HTTP/2
// connection health check of 5 s + 3 s, unless the environment sets one:
// its informers watch through one kube-apiserver at a time, and one that
// stops answering (frozen, cut off) would freeze its view of every peer for
// client-go's default 30 s + 15 s. With 5 s + 3 s a stuck connection is
// dropped, and the watches resume on another server, before a registration
// Lease (10 s) can seem to lapse.
//
// It sets environment variables because they are the only setting there
// is: k8s.io/apimachinery's SetTransportDefaults, under every client-go
// transport (the engine's, and those k8s.io/apiserver builds for
// delegated authentication and authorization), reads
// HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS and has
// no field in rest.Config. It must run before any client is built.
func defaultClientHealthCheck() {
	for k, v := range map[string]string{
		"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "5",
		"HTTP2_PING_TIMEOUT_SECONDS":      "3",
	} {
		if _, set := os.LookupEnv(k); !set {
			_ = os.Setenv(k, v)
		}
	}
}

func main() {
	defaultClientHealthCheck()
	ctx := genericapiserver.SetupSignalContext()
	cmd := server.NewCommand(ctx, server.NewOptions(), server.Run)
	os.Exit(cli.Run(cmd))
}
