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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Addresses inside a cluster's subnet 10.254.<octet>.0/24.
const (
	hostIPSuffix      = 1  // host side of the veth; the load balancer
	nsIPSuffix        = 2  // namespace side of the veth
	kubeIPSuffixBase  = 10 // kube-apiserver i: .10+i
	extIPSuffixBase   = 20 // peerdiscovery-apiserver replica i: .20+i
	maxKubeAPIServers = extIPSuffixBase - kubeIPSuffixBase
	maxExtReplicas    = 10
)

// network is a sealed network namespace with a veth pair to the host. The
// namespace has no default route and the host does not forward, so nothing
// leaves 10.254.<octet>.0/24: the host reaches the components through the
// veth, the components reach each other and the host's veth address.
type network struct {
	Name   string `json:"netns"`  // pd-<rand>
	HostIf string `json:"hostIf"` // pdh<rand>, host side
	NsIf   string `json:"nsIf"`   // pdn<rand>, namespace side
	Octet  int    `json:"octet"`
}

func newNetwork(octet int) (*network, error) {
	b := make([]byte, 3) // isNetworkID knows this length
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	r := hex.EncodeToString(b)
	return &network{Name: "pd-" + r, HostIf: "pdh" + r, NsIf: "pdn" + r, Octet: octet}, nil
}

// subnet is 10.254.<octet>.0/24.
func subnet(octet int) *net.IPNet {
	return &net.IPNet{IP: net.IPv4(10, 254, byte(octet), 0).To4(), Mask: net.CIDRMask(24, 32)}
}

// ip returns 10.254.<octet>.<suffix>.
func (n *network) ip(suffix int) net.IP {
	return net.IPv4(10, 254, byte(n.Octet), byte(suffix)).To4()
}

// ipCmd runs ip(8) and returns its output; errors carry the output.
func ipCmd(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// checkSubnetFree fails if any host address or route falls inside
// 10.254.<octet>.0/24 (another local cluster, a VPN, a container network).
func checkSubnetFree(octet int) error {
	sn := subnet(octet)
	inUse := func(what string) error {
		return fmt.Errorf("subnet %s is already in use on this host (%s); pick another third octet (Config.SubnetOctet, local-up --subnet-octet)", sn, what)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, ifc := range ifaces {
		if a := addressIn(ifc, sn); a != nil {
			return inUse(fmt.Sprintf("address %s on %s", a, ifc.Name))
		}
	}
	out, err := ipCmd("-j", "-4", "route", "show", "table", "all")
	if err != nil {
		return err
	}
	var routes []struct {
		Dst string `json:"dst"`
		Dev string `json:"dev"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return fmt.Errorf("parsing ip -j route: %w", err)
	}
	for _, r := range routes {
		if r.Dst == "" || r.Dst == "default" {
			continue
		}
		dst := r.Dst
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		_, rn, err := net.ParseCIDR(dst)
		if err != nil {
			continue
		}
		// Routes inside the subnet (or the subnet itself) conflict. A wider
		// route that merely covers it (10.0.0.0/8 via a VPN) is shadowed by
		// our /24 on the veth, which keeps the traffic local.
		if ones, _ := rn.Mask.Size(); ones >= 24 && sn.Contains(rn.IP) {
			return inUse(fmt.Sprintf("route %s dev %s", r.Dst, r.Dev))
		}
	}
	return nil
}

// claimSubnet owns the subnet host-wide for a cluster's lifetime (the lock
// is released by Stop, or by the kernel when the process dies), so two
// Starts racing for one subnet cannot both pass the check; then it clears
// dead clusters' leftovers and checks that nothing else uses the subnet.
func claimSubnet(octet int, logf func(string, ...any)) (*os.File, error) {
	lock, err := lockSubnet(octet)
	if err != nil {
		return nil, err
	}
	if err := reclaimSubnet(octet, logf); err != nil {
		logf("reclaiming %s: %v", subnet(octet), err)
	}
	if err := checkSubnetFree(octet); err != nil {
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// reclaimSubnet removes what dead local clusters left in the subnet: each
// veth named as newNetwork names them (pdh<id>) with an address in it,
// with its namespace pd-<id>, the processes in that namespace and, for a
// node-based run, the cgroups and runtime folder of run <id>. The caller
// holds the subnet's lock, which every Start takes before it creates its
// network, so no live cluster owns them; the run folder that names them
// may be in another checkout (a clone killed mid-run), where
// cleanStaleRuns cannot see it. Anything else in the subnet is left for
// checkSubnetFree to report.
func reclaimSubnet(octet int, logf func(string, ...any)) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	sn := subnet(octet)
	var errs []error
	for _, ifc := range ifaces {
		id, ours := strings.CutPrefix(ifc.Name, "pdh")
		if !ours || !isNetworkID(id) || addressIn(ifc, sn) == nil {
			continue
		}
		logf("reclaiming %s from a dead local cluster: netns pd-%s, veth %s", sn, id, ifc.Name)
		if err := cleanNodeRun("", id); err != nil {
			errs = append(errs, fmt.Errorf("the nodes of run %s: %w", id, err))
		}
		n := network{Name: "pd-" + id, HostIf: ifc.Name, NsIf: "pdn" + id, Octet: octet}
		if err := n.destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isNetworkID tells whether s is an id newNetwork makes: 6 hex digits.
func isNetworkID(s string) bool {
	if len(s) != 6 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// addressIn returns the interface's first address inside sn, or nil.
func addressIn(ifc net.Interface, sn *net.IPNet) *net.IPNet {
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && sn.Contains(ipn.IP) {
			return ipn
		}
	}
	return nil
}

// lockSubnet takes an exclusive, non-blocking flock on a host-wide file
// for the subnet; the kernel drops it when the process dies.
func lockSubnet(octet int) (*os.File, error) {
	dir := "/run/lock"
	if _, err := os.Stat(dir); err != nil {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("peerdiscovery-localcluster-10.254.%d.lock", octet))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("subnet %s is already used by another local cluster (%s, lock %s); pick another third octet (Config.SubnetOctet, local-up --subnet-octet)",
				subnet(octet), strings.TrimSpace(string(owner)), path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d", os.Getpid())), 0)
	return f, nil
}

// create makes the namespace, the veth pair and the addresses: hostIP on
// the host side, nsIP and every component address on the namespace side.
func (n *network) create(componentSuffixes []int) (err error) {
	defer func() {
		if err != nil {
			_ = n.destroy()
		}
	}()
	cidr := func(suffix int) string { return n.ip(suffix).String() + "/24" }
	steps := [][]string{
		{"netns", "add", n.Name},
		{"-n", n.Name, "link", "set", "lo", "up"},
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", n.NsIf},
		{"link", "set", n.NsIf, "netns", n.Name},
		{"addr", "add", cidr(hostIPSuffix), "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"-n", n.Name, "addr", "add", cidr(nsIPSuffix), "dev", n.NsIf},
	}
	for _, s := range componentSuffixes {
		steps = append(steps, []string{"-n", n.Name, "addr", "add", cidr(s), "dev", n.NsIf})
	}
	steps = append(steps, []string{"-n", n.Name, "link", "set", n.NsIf, "up"})
	for _, s := range steps {
		if _, err := ipCmd(s...); err != nil {
			return err
		}
	}
	// Addresses are usable at once (no DAD for IPv4); wait for the link.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := ipCmd("-n", n.Name, "-o", "link", "show", n.NsIf)
		if err == nil && strings.Contains(out, "LOWER_UP") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("veth %s in %s did not come up: %s", n.NsIf, n.Name, strings.TrimSpace(out))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exists reports whether the namespace is still there.
func (n *network) exists() bool {
	_, err := os.Stat(filepath.Join("/run/netns", n.Name))
	return err == nil
}

// destroy kills whatever still runs in the namespace, then deletes it (the
// veth pair goes with it) and the host side of the veth if it is left over.
func (n *network) destroy() error {
	var errs []error
	if n.exists() {
		killNetnsProcesses(n.Name)
		if _, err := ipCmd("netns", "del", n.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := net.InterfaceByName(n.HostIf); err == nil {
		// Deleting the namespace destroys its end of the pair, and with it
		// ours; wait a moment before deleting it by hand.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := net.InterfaceByName(n.HostIf); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := net.InterfaceByName(n.HostIf); err == nil {
			if _, err := ipCmd("link", "del", n.HostIf); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killNetnsProcesses SIGKILLs every process in the namespace and waits (up
// to 10s) until none is left: a namespace deleted while processes hold it
// lives on with its veth.
func killNetnsProcesses(name string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := ipCmd("netns", "pids", name)
		if err != nil {
			return
		}
		pids := strings.Fields(out)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dialContext dials addr from inside the namespace (for etcd, which only
// listens on the namespace's 127.0.0.1). The socket is created on a thread
// switched into the namespace and stays there.
func (n *network) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			// A thread left in the wrong namespace is discarded: the
			// goroutine exits while still locked.
			if restored {
				runtime.UnlockOSThread()
			}
		}()
		orig, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
		if err != nil {
			ch <- result{err: err}
			restored = true
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/run/netns", n.Name))
		if err != nil {
			ch <- result{err: err}
			restored = true
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", n.Name, err)}
			restored = true
			return
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		restored = unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}
