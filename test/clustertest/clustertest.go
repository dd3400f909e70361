// Package clustertest runs a test package's tests against one real local
// control plane (internal/localcluster), started once in TestMain.
package clustertest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// RunTests is the body of a test package's TestMain: it starts a cluster
// from cfg (the start bounded by startTimeout), hands it to use, runs the
// tests, names the component logs if they failed, stops the cluster and
// exits with the tests' code.
func RunTests(m *testing.M, startTimeout time.Duration, cfg localcluster.Config, use func(*localcluster.Cluster)) {
	if cfg.Logf == nil {
		cfg.Logf = func(f string, a ...any) { fmt.Printf("localcluster: "+f+"\n", a...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	c, err := localcluster.Start(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		os.Exit(1)
	}
	use(c)
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "component logs:")
		for name, path := range c.LogPaths() {
			fmt.Fprintf(os.Stderr, "  %s: %s\n", name, path)
		}
	}
	_ = c.Stop()
	os.Exit(code)
}
