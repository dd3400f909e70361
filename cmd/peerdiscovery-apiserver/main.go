// Command peerdiscovery-apiserver serves peerdiscovery.k8s.io.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"sigs.k8s.io/peerdiscovery/pkg/cmd/server"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	cmd := server.NewCommand(ctx, server.NewOptions(), server.Run)
	os.Exit(cli.Run(cmd))
}
