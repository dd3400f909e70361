// Package conformance runs upstream's own e2e tests through each
// kube-apiserver of a mixed-version control plane (v1.36.3 + v1.37.2, the
// internal/localcluster default): the committed selection of selection.txt,
// with hack/conformance.sh, as a user runs it against hack/local-up.sh.
// Through the older server the newer release's APIs are reached only
// through the filter, so the same suite passing through both servers, test
// by test, is the outside judge of "one cluster during an upgrade".
package conformance

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/clustertest"
)

var (
	cluster *localcluster.Cluster
	// routing is PEERDISCOVERY_ROUTING: peerdiscovery in CI; upstream (its
	// built-in proxy) or none on demand, to measure the same suite beside it.
	routing localcluster.Routing
)

func TestMain(m *testing.M) {
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		fmt.Println("conformance tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)")
		os.Exit(m.Run())
	}
	var err error
	if routing, err = localcluster.RoutingFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg := localcluster.Config{SubnetOctet: 84}
	if routing != localcluster.RoutingPeerDiscovery {
		cfg.SubnetOctet = 85 // can run beside the CI configuration
	}
	if err := routing.Apply(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	clustertest.RunTests(m, 20*time.Minute, cfg, func(c *localcluster.Cluster) { cluster = c })
}
