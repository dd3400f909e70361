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

package localcluster

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reclaimTestOctet is a subnet no package's plane uses (10.254.250.0/24).
const reclaimTestOctet = 250

func needNetworkAdmin(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
}

// TestClaimSubnetReclaimsADeadClustersNetwork leaves behind what a harness
// killed mid-run leaves, in a folder no later Start reads (another clone's
// output): the namespace, the veth with its address, a process in the
// namespace. The next Start on that subnet must reclaim it, not fail with
// "already in use" (CI's e2e and node-plane lanes failed so on a host
// where an earlier clone's test command had been killed).
func TestClaimSubnetReclaimsADeadClustersNetwork(t *testing.T) {
	needNetworkAdmin(t)
	if err := checkSubnetFree(reclaimTestOctet); err != nil {
		t.Skipf("the test's subnet is taken on this host: %v", err)
	}
	dead, err := newNetwork(reclaimTestOctet)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.create([]int{kubeIPSuffixBase}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.destroy() })
	// A component the dead harness left running in its namespace.
	orphan := exec.Command("ip", "netns", "exec", dead.Name, "sleep", "600")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	// Left behind means inside the namespace: wait until ip(8) has joined it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := ipCmd("netns", "pids", dead.Name)
		if strings.Contains(" "+strings.Join(strings.Fields(out), " ")+" ", " "+strconv.Itoa(orphan.Process.Pid)+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process did not enter %s: %q", dead.Name, out)
		}
	}

	lock, err := claimSubnet(reclaimTestOctet, t.Logf)
	if err != nil {
		t.Fatalf("claiming a subnet only a dead cluster used: %v", err)
	}
	lock.Close()
	if _, err := net.InterfaceByName(dead.HostIf); err == nil {
		t.Errorf("veth %s is still there", dead.HostIf)
	}
	if dead.exists() {
		t.Errorf("namespace %s is still there", dead.Name)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("the process in the dead cluster's namespace still runs")
	}
}

// TestClaimSubnetLeavesWhatIsNotOurs: an address in the subnet on an
// interface the harness did not name (a VPN, a container network) is
// reported, and left alone.
func TestClaimSubnetLeavesWhatIsNotOurs(t *testing.T) {
	needNetworkAdmin(t)
	if err := checkSubnetFree(reclaimTestOctet); err != nil {
		t.Skipf("the test's subnet is taken on this host: %v", err)
	}
	const name = "pdhtest250" // our prefix, not an id newNetwork makes
	if _, err := ipCmd("link", "add", name, "type", "veth", "peer", "name", name+"p"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ipCmd("link", "del", name) })
	if _, err := ipCmd("addr", "add", "10.254.250.7/24", "dev", name); err != nil {
		t.Fatal(err)
	}
	lock, err := claimSubnet(reclaimTestOctet, t.Logf)
	if err == nil {
		lock.Close()
		t.Fatal("claimed a subnet that another interface uses")
	}
	if !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), name) {
		t.Errorf("error = %v, want it to name %s as the user", err, name)
	}
	if _, err := net.InterfaceByName(name); err != nil {
		t.Errorf("the foreign interface was removed: %v", err)
	}
}
