// Package e2e runs the end-to-end suite on a real local mixed-version
// control plane (internal/localcluster): etcd, kube-apiserver v1.36.3 and two
// v1.37.2 with the filter linked in, two peerdiscovery-apiserver replicas
// behind a real APIService, driven with client-go and kubectl. No fakes.
package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/clustertest"
)

// The servers, by index.
const (
	old  = 0 // v1.36.3, certificates.k8s.io/v1 turned off
	new1 = 1 // v1.37.2
	new2 = 2 // v1.37.2
)

// tombstone is short so the suite sees a tombstone expire.
const tombstone = 90 * time.Second

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		fmt.Println("end-to-end tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)")
		os.Exit(m.Run())
	}
	// A shorter HTTP/2 health check than the 30s + 15s default, so the
	// frozen-server test is quick; the filter honours it like every client.
	env := []string{
		fmt.Sprintf("HTTP2_READ_IDLE_TIMEOUT_SECONDS=%d", int(http2ReadIdleTimeout.Seconds())),
		fmt.Sprintf("HTTP2_PING_TIMEOUT_SECONDS=%d", int(http2PingTimeout.Seconds())),
	}
	clustertest.RunTests(m, 20*time.Minute, localcluster.Config{
		Servers: []localcluster.ServerSpec{
			{Version: "v1.36.3", ExtraFlags: []string{"--runtime-config=certificates.k8s.io/v1=false"}, Env: env},
			{Version: "v1.37.2", Env: env},
			{Version: "v1.37.2", Env: env},
		},
		ExtensionReplicas: 2,
		TombstonePeriod:   tombstone,
		SubnetOctet:       79,
	}, func(c *localcluster.Cluster) { cluster = c })
}

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
}
