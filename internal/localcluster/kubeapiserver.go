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
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

func (c *Cluster) kubeAPIServerArgs(s *kubeServer) []string {
	p := c.pki
	ip := s.ip.String()
	args := []string{
		"--etcd-servers=" + etcdClientURL,
		"--advertise-address=" + ip,
		"--bind-address=" + ip,
		"--secure-port=" + strconv.Itoa(securePort),
		"--cert-dir=" + filepath.Join(c.runDir, s.name),
		"--tls-cert-file=" + s.certs[0],
		"--tls-private-key-file=" + s.certs[1],
		"--client-ca-file=" + p.caFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--enable-aggregator-routing=true",
		"--proxy-client-cert-file=" + p.frontProxyClientCert,
		"--proxy-client-key-file=" + p.frontProxyClientKey,
		"--requestheader-client-ca-file=" + p.frontProxyCAFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
	}
	if hasFlag(s.binary, "requestheader-uid-headers") {
		args = append(args, "--requestheader-uid-headers=X-Remote-Uid")
	}
	if !s.spec.OmitPeerFlags {
		args = append(args,
			"--peer-ca-file="+p.caFile,
			"--peer-advertise-ip="+ip,
			"--peer-advertise-port="+strconv.Itoa(securePort),
		)
	}
	args = append(args,
		"--endpoint-reconciler-type=lease",
		// On SIGTERM, end watches at once (clients relist elsewhere)
		// instead of keeping the HTTP server up for its 60s shutdown
		// timeout while a client (peerdiscovery-apiserver) watches.
		"--shutdown-watch-termination-grace-period=5s",
		// Every cluster keeps an audit log per server (see
		// auditPolicy), so a request can be followed across servers.
		"--audit-policy-file="+filepath.Join(c.runDir, auditPolicyFile),
		"--audit-log-path="+c.AuditLogPath(s.index),
		"--audit-log-maxsize=200",
		"--audit-log-maxbackup=1",
		"--v="+strconv.Itoa(c.cfg.Verbosity),
	)
	return append(args, s.spec.ExtraFlags...)
}

var (
	flagCacheMu sync.Mutex
	flagCache   = map[string]string{}
)

// hasFlag reports whether binary's --help lists --name.
func hasFlag(binary, name string) bool {
	flagCacheMu.Lock()
	help, ok := flagCache[binary]
	flagCacheMu.Unlock()
	if !ok {
		out, _ := exec.Command(binary, "--help").CombinedOutput()
		help = string(out)
		flagCacheMu.Lock()
		flagCache[binary] = help
		flagCacheMu.Unlock()
	}
	return strings.Contains(help, "--"+name+" ") || strings.Contains(help, "--"+name+"=")
}

// auditPolicyFile is the audit policy of every kube-apiserver, in the run
// folder.
const auditPolicyFile = "audit-policy.yaml"

// auditPolicy logs every resource request at Metadata level (user, verb,
// object, response code, annotations such as the filter's
// peerdiscovery.k8s.io/proxied-to), except the constant Lease renewals and
// Events, and no non-resource request.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
  - group: ""
    resources: ["events"]
- level: None
  nonResourceURLs: ["*"]
- level: Metadata
`

// AuditLogPath is the audit log of kube-apiserver i (JSON lines,
// audit.k8s.io/v1 Events).
func (c *Cluster) AuditLogPath(i int) string {
	if c.nodes != nil {
		return filepath.Join(c.nodeAuditDir(i), "audit.log")
	}
	return c.processAuditLogPath(i)
}

func (c *Cluster) processAuditLogPath(i int) string {
	return filepath.Join(c.logDir, fmt.Sprintf("kube-apiserver-%d-audit.log", i))
}

func (c *Cluster) startKubeAPIServers(ctx context.Context) error {
	if err := os.WriteFile(filepath.Join(c.runDir, auditPolicyFile), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	for _, s := range c.servers {
		s.proc = &process{
			name:    s.name,
			logPath: c.logPath(s.name),
			argv:    c.nsArgv(s.name, append([]string{s.binary}, c.kubeAPIServerArgs(s)...)...),
			env:     s.spec.Env,
			cred:    c.serverCredential(s.index),
		}
		c.cfg.Logf("starting %s %s on %s", s.name, s.spec.Version, s.ip)
		if err := s.proc.start(); err != nil {
			return err
		}
	}
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i, s := range c.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.waitKubeAPIServerReady(ctx, s)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) waitKubeAPIServerReady(ctx context.Context, s *kubeServer) error {
	return c.waitReadyz(ctx, s.proc, s.name+" "+s.spec.Version, c.AdminConfig(s.index))
}

func (c *Cluster) endpoint(s *kubeServer) string {
	return "https://" + net.JoinHostPort(s.ip.String(), strconv.Itoa(securePort))
}

func (c *Cluster) server(i int) (*kubeServer, error) {
	if i < 0 || i >= len(c.servers) {
		return nil, fmt.Errorf("no kube-apiserver %d (the cluster has %d)", i, len(c.servers))
	}
	return c.servers[i], nil
}
