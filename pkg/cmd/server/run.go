package server

import (
	"context"

	"sigs.k8s.io/peerdiscovery/pkg/apiserver"
)

// Run starts the server and blocks until ctx is done.
func Run(ctx context.Context, o *Options, srv *apiserver.Server) error {
	return srv.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
