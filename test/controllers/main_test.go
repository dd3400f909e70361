// Package controllers runs a real kube-controller-manager's garbage
// collector and namespace controller on a mixed-version control plane
// (test/localcluster): kube-apiserver v1.36.3 with policy/v1 turned off,
// which the controller manager (v1.36.3) talks to only, and v1.37.2, the
// only server of PodDisruptionBudgets and StorageVersionMigrations. Both
// controllers decide what to delete from discovery and from 404s: the
// filter must give them the whole cluster, and 503 (never 404) while the
// only capable server is away.
package controllers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/test/localcluster"
)

// The servers, by index.
const (
	old     = 0 // v1.36.3, policy/v1 off; the controller manager's server
	capable = 1 // v1.37.2
)

var cluster *localcluster.Cluster

// routing is what routes requests between the servers
// (PEERDISCOVERY_ROUTING): "" for peerdiscovery (the filter and
// peerdiscovery-apiserver, what CI runs), and, on demand, to measure the
// same scenarios beside it, "upstream" (plain upstream kube-apiservers with
// the built-in UnknownVersionInteroperabilityProxy; hack/build-kube-apiserver-upstream.sh)
// or "none" (plain upstream kube-apiservers, no peer proxy at all).
var routing = os.Getenv("PEERDISCOVERY_ROUTING")

func TestMain(m *testing.M) {
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		fmt.Println("controller tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)")
		os.Exit(m.Run())
	}
	servers := []localcluster.ServerSpec{
		{Version: "v1.36.3", ExtraFlags: []string{"--runtime-config=policy/v1=false"}},
		{Version: "v1.37.2"},
	}
	extensions := 1
	switch routing {
	case "":
	case "upstream", "none":
		extensions = -1
		for i := range servers {
			s := &servers[i]
			s.Binary = upstreamBinary(s.Version)
			gate := "--feature-gates=UnknownVersionInteroperabilityProxy=" + strconv.FormatBool(routing == "upstream")
			s.ExtraFlags = append(s.ExtraFlags, gate)
			s.OmitPeerFlags = routing == "none"
		}
	default:
		fmt.Fprintf(os.Stderr, "PEERDISCOVERY_ROUTING=%q: want \"\", upstream or none\n", routing)
		os.Exit(2)
	}
	localcluster.RunTests(m, 20*time.Minute, localcluster.Config{
		Servers: servers,
		ControllerManager: localcluster.ControllerManagerSpec{
			Server:      old,
			Controllers: []string{"namespace-controller", "garbage-collector-controller", "serviceaccount-controller"},
		},
		ExtensionReplicas: extensions,
		SubnetOctet:       81,
	}, func(c *localcluster.Cluster) { cluster = c })
}

// upstreamBinary is the plain upstream kube-apiserver of version, built by
// hack/build-kube-apiserver-upstream.sh.
func upstreamBinary(version string) string {
	out := os.Getenv("PEERDISCOVERY_OUTPUT_DIR")
	if out == "" {
		out = filepath.Join("..", "..", "_output")
	}
	p, err := filepath.Abs(filepath.Join(out, "bin", "kube-apiserver-upstream-"+version, "kube-apiserver"))
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "PEERDISCOVERY_ROUTING=%s needs hack/build-kube-apiserver-upstream.sh %s: %v\n", routing, version, err)
		os.Exit(2)
	}
	return p
}

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
}
