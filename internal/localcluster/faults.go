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
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Faults for the chaos soak (test/chaos), beside the graceful ones in
// components.go. Unlike those, none holds the cluster's operation lock
// while it waits for a process to exit or to get ready, so faults drawn at
// the same moment happen at the same moment.
//
// Two facts of the plane shape them. Every component shares one network
// namespace and connects to the others' addresses, which are local
// addresses: a connection from server A to server B has B's address at
// both ends, so no rule can tell A's packets by address. Each
// kube-apiserver therefore runs with a group ID of its own (root user;
// serverGID), and a partition matches the sockets' owner (iptables
// `-m owner --gid-owner` in OUTPUT) and marks the connection, so that the
// answers, sent by the other server's socket, are dropped too (CONNMARK).
// And the kernel has no netem: a slow server is one whose CPU is capped
// with the cgroup v1 cpu controller (cpu.cfs_quota_us), so every request
// it serves or proxies takes longer, as on an overloaded node.

// faultState is what the faults changed, so that they can be undone and
// Stop leaves nothing behind.
type faultState struct {
	mu sync.Mutex
	// partitions: "i-j" (i < j) -> the connection mark of its rules.
	partitions map[string]int
	nextMark   int
	// cgroups: server index -> the cgroup made for it and the one its
	// process came from.
	cgroups map[int]slowCgroup
}

type slowCgroup struct {
	dir, from string
	pid       int
}

// serverGIDBase + 100 × the subnet octet + the server index is the group
// ID of a kube-apiserver: distinct per server and per cluster on one host,
// far from any group a system defines.
const serverGIDBase = 2_000_000_000

// serverGID is kube-apiserver i's group ID.
func (c *Cluster) serverGID(i int) uint32 {
	return uint32(serverGIDBase + 100*c.cfg.SubnetOctet + i)
}

// serverCredential runs kube-apiserver i as root with its own group.
func (c *Cluster) serverCredential(i int) *syscall.Credential {
	return &syscall.Credential{Uid: 0, Gid: c.serverGID(i), Groups: []uint32{}}
}

// KillAPIServer sends sig (SIGKILL: a crash; SIGTERM: a graceful stop,
// SIGKILL after 60 s) to kube-apiserver i and waits until it exited. The
// load balancer in front of the servers skips it from the signal on.
func (c *Cluster) KillAPIServer(i int, sig syscall.Signal) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	return c.signalStop(&s.down, s.proc, fmt.Sprintf("%s (%s)", s.name, s.spec.Version), sig, 60*time.Second)
}

// RestartAPIServer starts the stopped kube-apiserver i again (same
// identity, address and flags) and waits for its /readyz (at most
// Config.StartTimeout).
func (c *Cluster) RestartAPIServer(ctx context.Context, i int) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	if err := c.startOnly(s.proc, s.name); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	if err := c.waitKubeAPIServerReady(ctx, s); err != nil {
		return err
	}
	s.down.Store(false)
	return nil
}

// KillExtension sends sig to peerdiscovery-apiserver replica i and waits
// until it exited (SIGKILL after 15 s), without taking it out of the
// EndpointSlice first: a crash, or a stop the endpoints have not caught up
// with yet. RestartExtensions starts it again.
func (c *Cluster) KillExtension(i int, sig syscall.Signal) error {
	e, err := c.ext(i)
	if err != nil {
		return err
	}
	return c.signalStop(&e.down, e.proc, e.name, sig, 15*time.Second)
}

// RestartExtensions starts the given stopped replicas at once (a rollout,
// or the Pods rescheduled after a node drain), waits for each one's
// /readyz and puts them back into the EndpointSlice. A replica that exits
// before it is ready (it cannot reach a kube-apiserver yet) is started
// again after 1, 2, 4… s, as the kubelet restarts a crashing container,
// within extReadyTimeout.
func (c *Cluster) RestartExtensions(ctx context.Context, replicas ...int) error {
	var exts []*extReplica
	for _, i := range replicas {
		e, err := c.ext(i)
		if err != nil {
			return err
		}
		if err := c.startOnly(e.proc, e.name); err != nil {
			return err
		}
		exts = append(exts, e)
	}
	errs := make([]error, len(exts))
	var wg sync.WaitGroup
	for j, e := range exts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, extReadyTimeout)
			defer cancel()
			for delay := time.Second; ; delay = min(2*delay, 10*time.Second) {
				errs[j] = c.waitReadyz(ctx, e.proc, e.name, c.extensionConfig(e))
				if errs[j] == nil || e.proc.exitErr() == nil || ctx.Err() != nil {
					return
				}
				c.cfg.Logf("%s exited before it was ready; starting it again in %s, as a kubelet would", e.name, delay)
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				if err := c.startOnly(e.proc, e.name); err != nil {
					errs[j] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, e := range exts {
		e.down.Store(false)
	}
	cs, err := c.adminClientset()
	if err != nil {
		return err
	}
	return c.applyEndpointSlice(ctx, cs)
}

// signalStop marks the component down, signals it and waits for its exit
// outside the operation lock.
func (c *Cluster) signalStop(down interface{ Store(bool) }, p *process, what string, sig syscall.Signal, grace time.Duration) error {
	c.opMu.Lock()
	if c.stopped.Load() {
		c.opMu.Unlock()
		return errors.New("the cluster is stopped")
	}
	down.Store(true)
	c.opMu.Unlock()
	c.cfg.Logf("sending %v to %s", sig, what)
	return p.stop(sig, grace)
}

// startOnly starts p again under the operation lock (so that Stop either
// sees it or is seen), without waiting for it to get ready.
func (c *Cluster) startOnly(p *process, what string) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.stopped.Load() {
		return errors.New("the cluster is stopped")
	}
	c.cfg.Logf("starting %s again", what)
	return p.start()
}

// SetAPIServerHealthy is what a load balancer's health check concludes
// about kube-apiserver i: unhealthy, the load balancer in front of the
// servers (the extension replicas' way in) opens no new connection to it
// and the harness's own admin requests avoid it, as for a stopped server.
// For a frozen server (FreezeAPIServer), whose kernel still accepts
// connections that then hang.
func (c *Cluster) SetAPIServerHealthy(i int, healthy bool) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	s.down.Store(!healthy)
	return nil
}

// PartitionAPIServers cuts every connection between kube-apiservers i and
// j, both ways, new and established, while both stay reachable from
// everything else (clients, the extension replicas, etcd). It needs
// iptables with the owner and connmark matches.
func (c *Cluster) PartitionAPIServers(i, j int) error {
	if i == j {
		return fmt.Errorf("partition of kube-apiserver %d from itself", i)
	}
	i, j, si, sj, key, err := c.serverPair(i, j)
	if err != nil {
		return err
	}
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	if c.faults.partitions == nil {
		c.faults.partitions = map[string]int{}
	}
	if _, ok := c.faults.partitions[key]; ok {
		return fmt.Errorf("kube-apiservers %d and %d are already partitioned", i, j)
	}
	c.faults.nextMark++
	mark := 0x5d00 + c.faults.nextMark
	if err := c.iptables(partitionRules(c.serverGID(i), c.serverGID(j), si.ip.String(), sj.ip.String(), mark, "-A")...); err != nil {
		_ = c.iptables(partitionRules(c.serverGID(i), c.serverGID(j), si.ip.String(), sj.ip.String(), mark, "-D")...)
		return err
	}
	c.faults.partitions[key] = mark
	c.cfg.Logf("partitioned %s and %s (connection mark %#x)", si.name, sj.name, mark)
	return nil
}

// HealPartition removes the partition between i and j: the connections
// it marked carry packets again (TCP retransmits what was dropped), as
// when a real partition heals.
func (c *Cluster) HealPartition(i, j int) error {
	i, j, si, sj, key, err := c.serverPair(i, j)
	if err != nil {
		return err
	}
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	mark, ok := c.faults.partitions[key]
	if !ok {
		return fmt.Errorf("kube-apiservers %d and %d are not partitioned", i, j)
	}
	delete(c.faults.partitions, key)
	c.cfg.Logf("healed the partition of %s and %s", si.name, sj.name)
	return c.iptables(partitionRules(c.serverGID(i), c.serverGID(j), si.ip.String(), sj.ip.String(), mark, "-D")...)
}

// serverPair orders i < j and returns both servers and the pair's key.
func (c *Cluster) serverPair(i, j int) (int, int, *kubeServer, *kubeServer, string, error) {
	if i > j {
		i, j = j, i
	}
	si, err := c.server(i)
	if err != nil {
		return 0, 0, nil, nil, "", err
	}
	sj, err := c.server(j)
	if err != nil {
		return 0, 0, nil, nil, "", err
	}
	return i, j, si, sj, fmt.Sprintf("%d-%d", i, j), nil
}

// partitionRules are the iptables commands (op -A adds, -D deletes) that
// mark connections from group gi to ipj:6443 and from gj to ipi:6443, and
// drop every packet of a marked connection.
func partitionRules(gi, gj uint32, ipi, ipj string, mark int, op string) [][]string {
	m := fmt.Sprintf("%#x", mark)
	port := strconv.Itoa(securePort)
	return [][]string{
		{op, "OUTPUT", "-p", "tcp", "-m", "owner", "--gid-owner", fmt.Sprint(gi), "-d", ipj, "--dport", port, "-j", "CONNMARK", "--set-mark", m},
		{op, "OUTPUT", "-p", "tcp", "-m", "owner", "--gid-owner", fmt.Sprint(gj), "-d", ipi, "--dport", port, "-j", "CONNMARK", "--set-mark", m},
		{op, "OUTPUT", "-m", "connmark", "--mark", m, "-j", "DROP"},
	}
}

// iptables runs each rule in the cluster's network namespace; every rule
// is tried, the errors are joined.
func (c *Cluster) iptables(rules ...[]string) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("a partition needs iptables (apt-get install iptables; hack/install-test-deps.sh does): %w", err)
	}
	var errs []error
	for _, r := range rules {
		args := append([]string{"netns", "exec", c.net.Name, "iptables", "-w", "5"}, r...)
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables %s: %w: %s", strings.Join(r, " "), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// cpuCgroupRoot is where the cgroup v1 cpu controller is mounted.
const cpuCgroupRoot = "/sys/fs/cgroup/cpu"

// SlowAPIServer caps kube-apiserver i at percent of one CPU (cgroup v1
// cpu.cfs_quota_us over a 100 ms period) until UnslowAPIServer, so that it
// answers, and proxies, slowly. The cap is on the running process: a
// restart ends it.
func (c *Cluster) SlowAPIServer(i, percent int) error {
	if percent < 1 || percent > 100 {
		return fmt.Errorf("CPU percent %d outside [1, 100]", percent)
	}
	s, err := c.server(i)
	if err != nil {
		return err
	}
	pid := s.proc.pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", s.name)
	}
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	if c.faults.cgroups == nil {
		c.faults.cgroups = map[int]slowCgroup{}
	}
	if _, ok := c.faults.cgroups[i]; ok {
		return fmt.Errorf("%s is already slowed", s.name)
	}
	from, err := cpuCgroupOf(pid)
	if err != nil {
		return err
	}
	dir := filepath.Join(cpuCgroupRoot, fmt.Sprintf("peerdiscovery-%s-%s", c.net.Name, s.name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("a slow server needs the cgroup v1 cpu controller at %s: %w", cpuCgroupRoot, err)
	}
	write := func(file, value string) error { return os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644) }
	if err := errors.Join(write("cpu.cfs_period_us", "100000"), write("cpu.cfs_quota_us", strconv.Itoa(1000*percent)), write("cgroup.procs", strconv.Itoa(pid))); err != nil {
		_ = os.Remove(dir)
		return fmt.Errorf("capping %s at %d%% CPU: %w", s.name, percent, err)
	}
	c.faults.cgroups[i] = slowCgroup{dir: dir, from: from, pid: pid}
	c.cfg.Logf("capped %s at %d%% of one CPU (%s)", s.name, percent, dir)
	return nil
}

// UnslowAPIServer lifts SlowAPIServer's cap: the process goes back to its
// former cgroup and the cgroup is removed.
func (c *Cluster) UnslowAPIServer(i int) error {
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	cg, ok := c.faults.cgroups[i]
	if !ok {
		return fmt.Errorf("kube-apiserver %d is not slowed", i)
	}
	delete(c.faults.cgroups, i)
	c.cfg.Logf("lifted the CPU cap of kube-apiserver-%d", i)
	return removeSlowCgroup(cg)
}

func removeSlowCgroup(cg slowCgroup) error {
	// Every process left in it (the server, if it still runs) goes back.
	if b, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(cg.from, "cgroup.procs"), []byte(f), 0o644)
		}
	}
	var err error
	for range 50 { // the kernel empties it a moment after the last move
		if err = os.Remove(cg.dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", cg.dir, err)
}

// cpuCgroupOf is the directory of pid's cgroup v1 cpu controller.
func cpuCgroupOf(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			if ctrl == "cpu" {
				return filepath.Join(cpuCgroupRoot, parts[2]), nil
			}
		}
	}
	return "", fmt.Errorf("process %d has no cgroup v1 cpu controller (cgroup v2 is not supported by SlowAPIServer)", pid)
}

// clearFaults undoes every fault still in place (Stop calls it): the
// cgroups go; the iptables rules go with the network namespace.
func (c *Cluster) clearFaults() error {
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	var errs []error
	for i, cg := range c.faults.cgroups {
		errs = append(errs, removeSlowCgroup(cg))
		delete(c.faults.cgroups, i)
	}
	c.faults.partitions = nil
	return errors.Join(errs...)
}
