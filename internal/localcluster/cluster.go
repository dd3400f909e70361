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

// Package localcluster starts a real local control plane for end-to-end
// tests and for hack/local-up.sh: etcd, kube-apiservers of several releases
// (built with the peerdiscovery filter linked in), and replicas of
// peerdiscovery-apiserver registered through a real APIService.
//
// Every component runs inside a sealed network namespace pd-<rand> with its
// own address in 10.254.<octet>.0/24 (loopback addresses are rejected by
// the endpoint reconciler and EndpointSlice validation); each
// kube-apiserver also gets its own UTS namespace and hostname, because
// kube-apiserver derives its identity from the hostname. The host reaches
// the components through a veth pair (10.254.<octet>.1 on the host side),
// so tests and kubectl run on the host. Nothing routes out of the
// namespace. It needs root, ip(8) and unshare(1).
//
//	c, err := localcluster.Start(ctx, localcluster.Config{Logf: t.Logf})
//	if err != nil { t.Fatal(err) }
//	t.Cleanup(func() { _ = c.Stop() })
//	cs := kubernetes.NewForConfigOrDie(c.AdminConfig(0))
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Fixed addresses and names of every local cluster.
const (
	// ServiceClusterIPRange is --service-cluster-ip-range; its first
	// address is the kubernetes Service's ClusterIP.
	ServiceClusterIPRange = "10.0.0.0/24"
	kubernetesServiceIP   = "10.0.0.1"
	securePort            = 6443
	etcdClientURL         = "http://127.0.0.1:2379"
	etcdPeerURL           = "http://127.0.0.1:2380"
	// ServiceAccountIssuer is --service-account-issuer.
	ServiceAccountIssuer = "https://kubernetes.default.svc"
	runMarkerFile        = "run.json"
)

// ServerInfo describes one kube-apiserver of a running cluster.
type ServerInfo struct {
	// Name is kube-apiserver-<i>, also its hostname (its identity Lease is
	// derived from it).
	Name    string
	Version string
	IP      string
	// Endpoint is https://<IP>:6443.
	Endpoint string
	// Context is its context in Kubeconfig(), named after the version.
	Context string
	LogPath string
}

// ExtensionInfo describes one peerdiscovery-apiserver replica.
type ExtensionInfo struct {
	Name     string
	IP       string
	Endpoint string
	LogPath  string
}

type kubeServer struct {
	index   int
	spec    ServerSpec
	name    string
	context string
	ip      net.IP
	binary  string
	certs   [2]string // serving cert, key
	proc    *process
	// down is set while the server is stopped on purpose (StopAPIServer):
	// the load balancer skips it and Health does not complain.
	down atomic.Bool
}

type extReplica struct {
	index int
	name  string
	ip    net.IP
	proc  *process
	down  atomic.Bool
}

// Cluster is a running local control plane. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg    Config
	bins   *binaries
	runDir string
	logDir string
	net    *network
	pki    *clusterPKI

	etcd    *process
	servers []*kubeServer
	exts    []*extReplica
	lb      *loadBalancer
	kcm     *process   // nil without a kube-controller-manager
	nodes   *nodePlane // nil on the process plane (see NodesSpec)

	kcmMu       sync.Mutex
	kcmRestarts int      // how often the harness restarted kube-controller-manager
	kcmReasons  []string // why, the last maxRestartReasons times

	lock *os.File // flock on the subnet

	faults faultState // partitions and CPU caps in place (faults.go)

	kubeconfig    string
	extKubeconfig string
	kubectlLink   string

	opMu     sync.Mutex // serializes Stop/Start of components
	stopOnce sync.Once
	stopErr  error
	stopped  atomic.Bool
}

// Start builds what is missing, then starts a cluster and waits until every
// kube-apiserver is ready and (with extension replicas) the APIService
// v1alpha1.peerdiscovery.k8s.io is Available and served through every
// kube-apiserver. On error everything started is stopped and the error
// names the log files.
func Start(ctx context.Context, cfg Config) (_ *Cluster, retErr error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("localcluster needs root (ip netns, unshare --uts)")
	}
	for _, tool := range []string{"ip", "unshare", "sh", "hostname"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("localcluster needs %s: %w", tool, err)
		}
	}
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	bins, err := cfg.resolveBinaries(ctx)
	if err != nil {
		return nil, err
	}
	var nodes *nodePlane
	if cfg.Nodes.Enabled {
		if nodes, err = cfg.resolveNodeBinaries(ctx, bins); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	start := time.Now()

	localUp := filepath.Join(cfg.OutputDir, "local-up")
	if err := os.MkdirAll(localUp, 0o755); err != nil {
		return nil, err
	}
	cleanStaleRuns(localUp, cfg.KeepRuns, cfg.Logf)
	subnetLock, err := claimSubnet(cfg.SubnetOctet, cfg.Logf)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			subnetLock.Close()
		}
	}()
	nw, err := newNetwork(cfg.SubnetOctet)
	if err != nil {
		return nil, err
	}
	runDir := filepath.Join(localUp, time.Now().Format("20060102-150405")+"-"+strings.TrimPrefix(nw.Name, "pd-"))
	c := &Cluster{
		cfg:    cfg,
		bins:   bins,
		runDir: runDir,
		logDir: filepath.Join(runDir, "logs"),
		net:    nw,
		lock:   subnetLock,
	}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return nil, err
	}
	if err := c.writeMarker(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			if err := c.Stop(); err != nil {
				cfg.Logf("stopping the failed cluster: %v", err)
			}
			retErr = fmt.Errorf("%w\n%s", retErr, c.describeLogs())
		}
	}()

	// Components and their addresses.
	var suffixes []int
	for i, s := range cfg.Servers {
		ks := &kubeServer{index: i, spec: s, name: fmt.Sprintf("kube-apiserver-%d", i), ip: nw.ip(kubeIPSuffixBase + i)}
		ks.binary = s.Binary
		if ks.binary == "" {
			ks.binary = bins.kubeAPIServer[s.Version]
		}
		c.servers = append(c.servers, ks)
		suffixes = append(suffixes, kubeIPSuffixBase+i)
	}
	assignContextNames(c.servers)
	if nodes != nil {
		c.nodes = nodes
		nodes.runID = strings.TrimPrefix(nw.Name, "pd-")
		for i, s := range c.servers {
			s.name = "kube-apiserver-" + nodeName(i) // the mirror pod's name
			nodes.nodes = append(nodes.nodes, &node{index: i, name: nodeName(i), ip: s.ip,
				dir:     filepath.Join(runDir, "nodes", nodeName(i)),
				runtime: filepath.Join(nodeRuntimeBase, nodes.runID, nodeName(i)),
				cgroup:  filepath.Join(cgroupBase, nodes.runID, nodeName(i))})
		}
	}
	var extIPs []net.IP
	for i := 0; i < cfg.ExtensionReplicas && nodes == nil; i++ {
		c.exts = append(c.exts, &extReplica{index: i, name: fmt.Sprintf("peerdiscovery-apiserver-%d", i), ip: nw.ip(extIPSuffixBase + i)})
		extIPs = append(extIPs, nw.ip(extIPSuffixBase+i))
		suffixes = append(suffixes, extIPSuffixBase+i)
	}

	cfg.Logf("creating network namespace %s (%s, host side %s = %s)", nw.Name, subnet(cfg.SubnetOctet), nw.HostIf, nw.ip(hostIPSuffix))
	if err := nw.create(suffixes); err != nil {
		return nil, err
	}
	if c.pki, err = newPKI(filepath.Join(runDir, "pki"), extIPs); err != nil {
		return nil, err
	}
	for _, s := range c.servers {
		ips := []net.IP{s.ip, nw.ip(hostIPSuffix), net.ParseIP(kubernetesServiceIP), net.ParseIP("127.0.0.1")}
		cert, key, err := c.pki.kubeAPIServerCert(s.name, ips)
		if err != nil {
			return nil, err
		}
		s.certs = [2]string{cert, key}
	}

	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	if c.nodes != nil {
		if err := c.startNodePlane(ctx); err != nil {
			return nil, err
		}
	} else if err := c.startProcessPlane(ctx); err != nil {
		return nil, err
	}
	if cfg.LinkKubeconfig {
		if err := c.linkKubeconfig(localUp); err != nil {
			return nil, err
		}
	}
	cfg.Logf("cluster up in %s (run folder %s)", time.Since(start).Round(100*time.Millisecond), runDir)
	return c, nil
}

// startProcessPlane starts the kube-apiservers, the extension replicas and
// kube-controller-manager as processes.
func (c *Cluster) startProcessPlane(ctx context.Context) error {
	if err := c.startKubeAPIServers(ctx); err != nil {
		return err
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	if len(c.exts) > 0 {
		if err := c.deployExtension(ctx); err != nil {
			return err
		}
	}
	// After the extension server: its controllers then start with the
	// whole cluster's discovery.
	if !c.cfg.ControllerManager.Disabled {
		if err := c.startControllerManager(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every process of the cluster (SIGTERM, then SIGKILL), deletes
// the network namespace and its veth, the etcd data and the run marker,
// and removes the stable kubeconfig link if it points at this cluster. The
// run folder keeps the logs, certificates and kubeconfig. Stop is
// idempotent.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopped.Store(true)
		c.opMu.Lock()
		defer c.opMu.Unlock()
		var errs []error
		var mu sync.Mutex
		var wg sync.WaitGroup
		stopAll := func(procs []*process, grace time.Duration) {
			for _, p := range procs {
				if p == nil {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := p.stop(syscall.SIGTERM, grace); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		stopAll([]*process{c.kcm}, 10*time.Second)
		var exts []*process
		for _, e := range c.exts {
			exts = append(exts, e.proc)
		}
		stopAll(exts, 10*time.Second)
		if c.lb != nil {
			c.lb.close()
		}
		if c.nodes != nil {
			if err := c.stopNodes(); err != nil {
				errs = append(errs, err)
			}
		}
		var servers []*process
		for _, s := range c.servers {
			servers = append(servers, s.proc)
		}
		stopAll(servers, 20*time.Second)
		stopAll([]*process{c.etcd}, 10*time.Second)
		if err := c.clearFaults(); err != nil {
			errs = append(errs, err)
		}
		if err := c.net.destroy(); err != nil {
			errs = append(errs, err)
		}
		_ = os.RemoveAll(filepath.Join(c.runDir, "etcd-data"))
		_ = os.Remove(filepath.Join(c.runDir, runMarkerFile))
		if c.kubectlLink != "" {
			if target, err := os.Readlink(c.kubectlLink); err == nil && target == c.relKubeconfig() {
				_ = os.Remove(c.kubectlLink)
			}
		}
		c.lock.Close() // releases the subnet
		c.stopErr = errors.Join(errs...)
		c.cfg.Logf("cluster stopped (logs kept in %s)", c.logDir)
	})
	return c.stopErr
}
