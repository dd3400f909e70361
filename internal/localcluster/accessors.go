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
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// Kubeconfig is the path of the admin kubeconfig: one context per
// kube-apiserver named after its version, the newest current.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RunDir is the folder of this run (logs/, pki/, kubeconfig).
func (c *Cluster) RunDir() string { return c.runDir }

// OutputDir is the output folder the cluster's binaries and runs are in.
func (c *Cluster) OutputDir() string { return c.cfg.OutputDir }

// RepoRoot is the checkout of sigs.k8s.io/peerdiscovery the cluster runs.
func (c *Cluster) RepoRoot() string { return c.cfg.RepoRoot }

// NetworkNamespace is the name of the cluster's network namespace.
func (c *Cluster) NetworkNamespace() string { return c.net.Name }

// CACertPEM is the cluster CA (serving certificates of the kube-apiservers,
// client certificates).
func (c *Cluster) CACertPEM() []byte { return append([]byte(nil), c.pki.ca.CertPEM...) }

// CAFile is the path of the cluster CA.
func (c *Cluster) CAFile() string { return c.pki.caFile }

// HelperAddress is an address inside the network namespace that no
// component listens on (10.254.<octet>.2), for processes a test starts
// there with RunInNetwork.
func (c *Cluster) HelperAddress() string { return c.net.ip(nsIPSuffix).String() }

// HostAddress is the host side of the cluster's veth (10.254.<octet>.1):
// the components reach a server that a test runs on the host there (an
// admission webhook, say).
func (c *Cluster) HostAddress() string { return c.net.ip(hostIPSuffix).String() }

// FrontProxyClientFiles are the certificate and key the kube-apiservers
// proxy with (--proxy-client-cert-file, --proxy-client-key-file).
func (c *Cluster) FrontProxyClientFiles() (certFile, keyFile string) {
	return c.pki.frontProxyClientCert, c.pki.frontProxyClientKey
}

// FrontProxyCAFile is the CA the kube-apiservers verify proxy clients
// with (--requestheader-client-ca-file); an aggregated API server behind
// an APIService verifies the aggregator with it.
func (c *Cluster) FrontProxyCAFile() string { return c.pki.frontProxyCAFile }

// LoadBalancerEndpoint is https://10.254.<octet>.1:<port>, a TCP load
// balancer over every running kube-apiserver ("" without extension
// replicas).
func (c *Cluster) LoadBalancerEndpoint() string {
	if c.lb == nil {
		return ""
	}
	return "https://" + c.lb.addr()
}

// Servers describes the kube-apiservers, in Config.Servers order.
func (c *Cluster) Servers() []ServerInfo {
	out := make([]ServerInfo, len(c.servers))
	for i, s := range c.servers {
		out[i] = ServerInfo{Name: s.name, Version: s.spec.Version, IP: s.ip.String(), Endpoint: c.endpoint(s), Context: s.context}
		if s.proc != nil {
			out[i].LogPath = s.proc.logPath
		} else if c.nodes != nil {
			out[i].LogPath = c.nodes.nodes[i].podLogsDir() // the kubelet's Pod logs
		}
	}
	return out
}

// ServerPID is the process ID of kube-apiserver i (0 when it does not
// run), for reading its memory and CPU time from /proc: nsArgv execs all
// the way down, so it is kube-apiserver's own.
func (c *Cluster) ServerPID(i int) (int, error) {
	s, err := c.server(i)
	if err != nil {
		return 0, err
	}
	return s.proc.pid(), nil
}

// EtcdPID is the process ID of etcd (0 when it does not run).
func (c *Cluster) EtcdPID() int {
	if c.etcd == nil {
		return 0
	}
	return c.etcd.pid()
}

// ExtensionPID is the process ID of peerdiscovery-apiserver replica i (0
// when it does not run).
func (c *Cluster) ExtensionPID(i int) (int, error) {
	e, err := c.ext(i)
	if err != nil || e.proc == nil {
		return 0, err
	}
	return e.proc.pid(), nil
}

// Extensions describes the peerdiscovery-apiserver replicas.
func (c *Cluster) Extensions() []ExtensionInfo {
	out := make([]ExtensionInfo, len(c.exts))
	for i, e := range c.exts {
		out[i] = ExtensionInfo{Name: e.name, IP: e.ip.String(), Endpoint: c.extEndpoint(e), LogPath: c.logPath(e.name)}
	}
	return out
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.logDir, name+".log") }

// LogPaths maps every component's name (etcd, kube-apiserver-<i>,
// peerdiscovery-apiserver-<i>) to its log file.
func (c *Cluster) LogPaths() map[string]string {
	m := map[string]string{"etcd": c.logPath("etcd")}
	if c.nodes != nil {
		c.nodeLogPaths(m)
	} else {
		for _, s := range c.servers {
			m[s.name] = c.logPath(s.name)
		}
	}
	for _, e := range c.exts {
		m[e.name] = c.logPath(e.name)
	}
	if c.kcm != nil {
		m[ControllerManagerName] = c.kcm.logPath
	}
	return m
}

func (c *Cluster) describeLogs() string {
	m := c.LogPaths()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("logs:")
	for _, n := range names {
		fmt.Fprintf(&b, "\n  %s: %s", n, m[n])
	}
	return b.String()
}

// Health returns an error naming every component that is not running
// although it was not stopped on purpose.
func (c *Cluster) Health() error {
	var errs []error
	if err := c.etcd.exitErr(); err != nil {
		errs = append(errs, err)
	}
	if c.nodes != nil {
		errs = append(errs, c.nodesHealth())
	}
	for _, s := range c.servers {
		if s.proc == nil {
			continue // a static pod: the kubelet restarts it
		}
		if err := s.proc.exitErr(); err != nil && !s.down.Load() {
			errs = append(errs, fmt.Errorf("%w (log: %s)", err, s.proc.logPath))
		}
	}
	for _, e := range c.exts {
		if e.proc == nil {
			continue
		}
		if err := e.proc.exitErr(); err != nil && !e.down.Load() {
			errs = append(errs, fmt.Errorf("%w (log: %s)", err, e.proc.logPath))
		}
	}
	if c.kcm != nil {
		// The harness restarts it (superviseControllerManager); not
		// running now means it is between two restarts.
		if err := c.kcm.exitErr(); err != nil {
			errs = append(errs, fmt.Errorf("%w, %d restart(s) so far (log: %s)", err, c.controllerManagerRestartCount(), c.kcm.logPath))
		}
	}
	return errors.Join(errs...)
}
