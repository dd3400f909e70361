// Package integration runs peerdiscovery-apiserver in-process against a real
// kube-apiserver (etcd and kube-apiserver v1.37.2 built from the module
// proxy, see hack/build-all.sh) that it delegates authentication and
// authorization to, and drives it with the generated clientset, a shared
// informer and raw requests. Views are published directly: the peer engine
// is tested on its own (pkg/engine) and end to end (test/e2e).
package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/clustertest"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		fmt.Println("integration tests need real etcd and kube-apiserver binaries: set PEERDISCOVERY_E2E=1 (hack/test.sh does)")
		os.Exit(m.Run()) // every test skips itself
	}
	// WatchList is client-go's default in v0.37; make it explicit so the
	// informer test exercises it whatever the default.
	os.Setenv("KUBE_FEATURE_WatchListClient", "true")
	clustertest.RunTests(m, 15*time.Minute, localcluster.Config{
		Servers:           []localcluster.ServerSpec{{Version: "v1.37.2"}},
		ExtensionReplicas: -1,
		// The engine's tests need no controllers.
		ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
		SubnetOctet:       80,
	}, func(c *localcluster.Cluster) { cluster = c })
}

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run against real etcd and kube-apiserver")
	}
}
