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
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"
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
	pki    *pki

	etcd    *process
	servers []*kubeServer
	exts    []*extReplica
	lb      *loadBalancer
	kcm     *process // nil without a kube-controller-manager

	kcmMu       sync.Mutex
	kcmRestarts int      // how often the harness restarted kube-controller-manager
	kcmReasons  []string // why, the last maxRestartReasons times

	lock *os.File // flock on the subnet

	kubeconfig    string
	extKubeconfig string
	kubectlLink   string

	opMu     sync.Mutex // serializes Stop/Start of components
	stopOnce sync.Once
	stopErr  error
	stopped  atomic.Bool
}

// runMarker is OutputDir/local-up/<run>/run.json: who created the run's
// network namespace, so a later Start can clean up after a dead run.
type runMarker struct {
	PID      int       `json:"pid"`
	PIDStart uint64    `json:"pidStart"`
	Created  time.Time `json:"created"`
	Network  network   `json:"network"`
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

	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	start := time.Now()

	localUp := filepath.Join(cfg.OutputDir, "local-up")
	if err := os.MkdirAll(localUp, 0o755); err != nil {
		return nil, err
	}
	// Own the subnet host-wide for the cluster's lifetime (released by
	// Stop, or by the kernel when this process dies), so two Starts racing
	// for one subnet cannot both pass the check below.
	subnetLock, err := lockSubnet(cfg.SubnetOctet)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			subnetLock.Close()
		}
	}()
	cleanStaleRuns(localUp, cfg.KeepRuns, cfg.Logf)
	if err := checkSubnetFree(cfg.SubnetOctet); err != nil {
		return nil, err
	}
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
	var extIPs []net.IP
	for i := 0; i < cfg.ExtensionReplicas; i++ {
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
	if err := c.startKubeAPIServers(ctx); err != nil {
		return nil, err
	}
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}
	if len(c.exts) > 0 {
		if err := c.deployExtension(ctx); err != nil {
			return nil, err
		}
	}
	// After the extension server: its controllers then start with the
	// whole cluster's discovery.
	if !cfg.ControllerManager.Disabled {
		if err := c.startControllerManager(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.LinkKubeconfig {
		if err := c.linkKubeconfig(localUp); err != nil {
			return nil, err
		}
	}
	cfg.Logf("cluster up in %s (run folder %s)", time.Since(start).Round(100*time.Millisecond), runDir)
	return c, nil
}

// assignContextNames names each server's kubeconfig context after its
// version, with -<index> for repeated versions.
func assignContextNames(servers []*kubeServer) {
	count := map[string]int{}
	for _, s := range servers {
		count[s.spec.Version]++
	}
	for _, s := range servers {
		s.context = s.spec.Version
		if count[s.spec.Version] > 1 {
			s.context = fmt.Sprintf("%s-%d", s.spec.Version, s.index)
		}
	}
}

// newestServer is the index of the server with the highest version (the
// last one among equals): the kubeconfig's current context.
func newestServer(servers []*kubeServer) int {
	best := 0
	for i, s := range servers {
		vi := utilversion.MustParseSemantic(s.spec.Version)
		vb := utilversion.MustParseSemantic(servers[best].spec.Version)
		if vi.AtLeast(vb) {
			best = i
		}
	}
	return best
}

func (c *Cluster) writeMarker() error {
	m := runMarker{PID: os.Getpid(), PIDStart: procStartTime(os.Getpid()), Created: time.Now(), Network: *c.net}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.runDir, runMarkerFile), b, 0o644)
}

// procStartTime is field 22 of /proc/<pid>/stat (0 if unknown): with the
// pid it identifies a process across pid reuse.
func procStartTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}

func (m *runMarker) ownerAlive() bool {
	if m.PID <= 0 {
		return false
	}
	if err := syscall.Kill(m.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return m.PIDStart == 0 || procStartTime(m.PID) == m.PIDStart
}

// cleanStaleRuns removes the network namespaces (and veths, and processes)
// of runs under dir whose creator is dead, and prunes the folders of
// finished runs beyond the newest keep.
func cleanStaleRuns(dir string, keep int, logf func(string, ...any)) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var finished []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		runDir := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(filepath.Join(runDir, runMarkerFile))
		if err != nil {
			if _, err := os.Stat(filepath.Join(runDir, "logs")); err == nil {
				finished = append(finished, runDir)
			}
			continue
		}
		var m runMarker
		if err := json.Unmarshal(b, &m); err != nil {
			continue
		}
		if m.ownerAlive() {
			continue
		}
		if m.Network.Name != "" && strings.HasPrefix(m.Network.Name, "pd-") {
			logf("cleaning up after dead run %s (pid %d): netns %s, veth %s", e.Name(), m.PID, m.Network.Name, m.Network.HostIf)
			if err := m.Network.destroy(); err != nil {
				logf("cleaning up %s: %v", m.Network.Name, err)
				continue
			}
		}
		_ = os.RemoveAll(filepath.Join(runDir, "etcd-data"))
		_ = os.Remove(filepath.Join(runDir, runMarkerFile))
		finished = append(finished, runDir)
	}
	// Run folder names start with a timestamp: oldest first.
	sort.Strings(finished)
	if len(finished) > keep {
		for _, d := range finished[:len(finished)-keep] {
			_ = os.RemoveAll(d)
		}
	}
}

// nsArgv runs argv inside the cluster's network namespace; with hostname,
// also in a new UTS namespace with that hostname. The command execs all
// the way down, so the pid (and process group) is the component's.
func (c *Cluster) nsArgv(hostname string, argv ...string) []string {
	out := []string{"ip", "netns", "exec", c.net.Name}
	if hostname != "" {
		out = append(out, "unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, hostname)
	}
	return append(out, argv...)
}

// argvHostname is the hostname nsArgv set ("" for none).
func argvHostname(argv []string) string {
	for i, a := range argv {
		if a == `hostname "$0" && exec "$@"` && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.logDir, name+".log") }

// ---------------------------------------------------------------- etcd

func (c *Cluster) startEtcd(ctx context.Context) error {
	dataDir := filepath.Join(c.runDir, "etcd-data")
	c.etcd = &process{
		name:    "etcd",
		logPath: c.logPath("etcd"),
		argv: c.nsArgv("", c.bins.etcd,
			"--name=default",
			"--data-dir="+dataDir,
			"--listen-client-urls="+etcdClientURL,
			"--advertise-client-urls="+etcdClientURL,
			"--listen-peer-urls="+etcdPeerURL,
			"--initial-advertise-peer-urls="+etcdPeerURL,
			"--initial-cluster=default="+etcdPeerURL,
			// A throwaway local cluster: durability is not worth the
			// latency on slow disks.
			"--unsafe-no-fsync",
			"--log-level=warn",
		),
	}
	c.cfg.Logf("starting etcd %s", EtcdVersion)
	if err := c.etcd.start(); err != nil {
		return err
	}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{DialContext: c.net.dialContext, DisableKeepAlives: true},
	}
	return c.waitFor(ctx, c.etcd, "etcd /health", func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, etcdClientURL+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`), string(body)
	})
}

// waitFor polls check every 250ms until it succeeds, the process exits or
// ctx is done; errors carry the last observation and the log tail.
func (c *Cluster) waitFor(ctx context.Context, p *process, what string, check func(context.Context) (bool, string)) error {
	last := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, detail := check(cctx)
		cancel()
		if ok {
			return nil
		}
		if detail != "" {
			last = detail
		}
		if p != nil {
			if err := p.exitErr(); err != nil {
				return fmt.Errorf("waiting for %s: %w; last lines of %s:\n%s", what, err, p.logPath, p.logTail(30))
			}
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("waiting for %s: %v", what, ctx.Err())
			if last != "" {
				msg += "; last response: " + strings.TrimSpace(last)
			}
			if p != nil {
				if errs := p.logErrors(10); errs != "" {
					msg += fmt.Sprintf("; last errors in %s:\n%s\n", p.logPath, errs)
				}
				msg += fmt.Sprintf("; last lines of %s:\n%s", p.logPath, p.logTail(20))
			}
			return errors.New(msg)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ---------------------------------------------------------------- kube-apiserver

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
	start := time.Now()
	client, err := rest.HTTPClientFor(c.AdminConfig(s.index))
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	err = c.waitFor(ctx, s.proc, s.name+" /readyz", func(ctx context.Context) (bool, string) {
		return httpOK(ctx, client, c.endpoint(s)+"/readyz?verbose")
	})
	if err == nil {
		c.cfg.Logf("%s %s ready in %s", s.name, s.spec.Version, time.Since(start).Round(100*time.Millisecond))
	}
	return err
}

// httpOK GETs url and reports whether it answered 200, and what it said.
func httpOK(ctx context.Context, client *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, failedChecks(string(body)))
	}
	return true, ""
}

// failedChecks keeps the [-] lines of a verbose /readyz body (all of it if
// there are none).
func failedChecks(body string) string {
	var bad []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			bad = append(bad, l)
		}
	}
	if len(bad) == 0 {
		return strings.TrimSpace(body)
	}
	return strings.Join(bad, "; ")
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

// StopAPIServer stops kube-apiserver i with sig: SIGTERM for a graceful
// shutdown (SIGKILL after 60s), SIGKILL for a crash. The load balancer in
// front of the servers skips it until StartAPIServer.
func (c *Cluster) StopAPIServer(i int, sig syscall.Signal) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	s.down.Store(true)
	c.cfg.Logf("stopping %s (%s) with %v", s.name, s.spec.Version, sig)
	return s.proc.stop(sig, 60*time.Second)
}

// FreezeAPIServer stops kube-apiserver i with SIGSTOP: its connections stay
// open and its kernel still accepts new ones, but it answers nothing, as a
// hung or partitioned server would. ThawAPIServer resumes it.
func (c *Cluster) FreezeAPIServer(i int) error { return c.signalAPIServer(i, syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen kube-apiserver i with SIGCONT.
func (c *Cluster) ThawAPIServer(i int) error { return c.signalAPIServer(i, syscall.SIGCONT) }

func (c *Cluster) signalAPIServer(i int, sig syscall.Signal) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	c.cfg.Logf("sending %v to %s (%s)", sig, s.name, s.spec.Version)
	return s.proc.signal(sig)
}

// StartAPIServer starts kube-apiserver i again with the same hostname
// (identity), address, certificates and flags, and waits for its /readyz.
func (c *Cluster) StartAPIServer(i int) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.stopped.Load() {
		return errors.New("the cluster is stopped")
	}
	c.cfg.Logf("starting %s (%s) again", s.name, s.spec.Version)
	if err := s.proc.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StartTimeout)
	defer cancel()
	err = c.waitKubeAPIServerReady(ctx, s)
	if err == nil {
		s.down.Store(false)
	}
	return err
}

// StartAPIServerAs starts kube-apiserver i again under another hostname,
// so under another identity, at the same address with the same flags (a
// control-plane machine replaced, or a static Pod that came back renamed).
// Later StartAPIServer calls keep that hostname.
func (c *Cluster) StartAPIServerAs(i int, hostname string) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	c.opMu.Lock()
	s.proc.argv = c.nsArgv(hostname, append([]string{s.binary}, c.kubeAPIServerArgs(s)...)...)
	c.opMu.Unlock()
	return c.StartAPIServer(i)
}

// UpgradeAPIServer starts the stopped kube-apiserver i as spec (another
// release, binary or flags), with the same hostname (identity), address
// and certificates, as a node's static Pod does after kubeadm upgrade, and
// waits for its /readyz. The binary of spec.Version must be built; a
// routing other than this project's gives spec.Binary.
func (c *Cluster) UpgradeAPIServer(i int, spec ServerSpec) error {
	s, err := c.server(i)
	if err != nil {
		return err
	}
	binary := spec.Binary
	if binary == "" {
		binary = filepath.Join(c.cfg.binDir(), "kube-apiserver-"+spec.Version, "kube-apiserver")
	}
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("kube-apiserver %s: %w (hack/build-kube-apiserver.sh %s)", spec.Version, err, spec.Version)
	}
	c.opMu.Lock()
	if !s.down.Load() || s.proc.exitErr() == nil {
		c.opMu.Unlock()
		return fmt.Errorf("%s must be stopped before it is upgraded", s.name)
	}
	hostname := argvHostname(s.proc.argv) // StartAPIServerAs may have changed it
	s.spec, s.binary = spec, binary
	s.proc.argv = c.nsArgv(hostname, append([]string{s.binary}, c.kubeAPIServerArgs(s)...)...)
	s.proc.env = spec.Env
	c.opMu.Unlock()
	return c.StartAPIServer(i)
}

// ---------------------------------------------------------------- accessors

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

// FrontProxyClientFiles are the certificate and key the kube-apiservers
// proxy with (--proxy-client-cert-file, --proxy-client-key-file).
func (c *Cluster) FrontProxyClientFiles() (certFile, keyFile string) {
	return c.pki.frontProxyClientCert, c.pki.frontProxyClientKey
}

// RunInNetwork starts argv inside the cluster's network namespace, logging
// to logs/<name>.log. The returned function stops it (SIGTERM, then
// SIGKILL after 5s); Stop kills it too, with everything else left in the
// namespace.
func (c *Cluster) RunInNetwork(name string, argv ...string) (stop func() error, err error) {
	if c.stopped.Load() {
		return nil, fmt.Errorf("cluster is stopped")
	}
	p := &process{name: name, logPath: c.logPath(name), argv: c.nsArgv("", argv...)}
	if err := p.start(); err != nil {
		return nil, err
	}
	return func() error { return p.stop(syscall.SIGTERM, 5*time.Second) }, nil
}

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
		out[i] = ServerInfo{Name: s.name, Version: s.spec.Version, IP: s.ip.String(), Endpoint: c.endpoint(s), Context: s.context, LogPath: s.proc.logPath}
	}
	return out
}

// Extensions describes the peerdiscovery-apiserver replicas.
func (c *Cluster) Extensions() []ExtensionInfo {
	out := make([]ExtensionInfo, len(c.exts))
	for i, e := range c.exts {
		out[i] = ExtensionInfo{Name: e.name, IP: e.ip.String(), Endpoint: c.extEndpoint(e), LogPath: c.logPath(e.name)}
	}
	return out
}

// LogPaths maps every component's name (etcd, kube-apiserver-<i>,
// peerdiscovery-apiserver-<i>) to its log file.
func (c *Cluster) LogPaths() map[string]string {
	m := map[string]string{"etcd": c.logPath("etcd")}
	for _, s := range c.servers {
		m[s.name] = c.logPath(s.name)
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

// AdminConfig is a client-go config for kube-apiserver i as a
// system:masters user (client certificate), verifying the server against
// the cluster CA. It panics if i is out of range.
func (c *Cluster) AdminConfig(i int) *rest.Config {
	return c.clientConfig(i, c.pki.admin)
}

// ExtensionConfig is a client-go config for peerdiscovery-apiserver
// replica i at its own address (not through the aggregator), as a
// system:masters user, verifying the replica against the APIService's CA.
// It panics if i is out of range.
func (c *Cluster) ExtensionConfig(i int) *rest.Config {
	e, err := c.ext(i)
	if err != nil {
		panic(err)
	}
	return &rest.Config{
		Host: c.extEndpoint(e),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     append([]byte(nil), c.pki.extCA.CertPEM...),
			ServerName: extServiceDNS,
			CertData:   append([]byte(nil), c.pki.admin.CertPEM...),
			KeyData:    append([]byte(nil), c.pki.admin.KeyPEM...),
		},
		QPS:   100,
		Burst: 200,
	}
}

// UserConfig is a client-go config for kube-apiserver i authenticated as
// user with groups (a fresh client certificate from the cluster CA; the
// groups system:authenticated is added by the server). It panics if i is
// out of range.
func (c *Cluster) UserConfig(i int, user string, groups []string) *rest.Config {
	kp, err := c.pki.ca.NewClientCert(user, groups)
	if err != nil {
		panic(fmt.Sprintf("minting a client certificate for %q: %v", user, err))
	}
	return c.clientConfig(i, kp)
}

func (c *Cluster) clientConfig(i int, kp *KeyPair) *rest.Config {
	s, err := c.server(i)
	if err != nil {
		panic(err)
	}
	return &rest.Config{
		Host: c.endpoint(s),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   append([]byte(nil), c.pki.ca.CertPEM...),
			CertData: append([]byte(nil), kp.CertPEM...),
			KeyData:  append([]byte(nil), kp.KeyPEM...),
		},
		QPS:   100,
		Burst: 200,
	}
}

// Kubectl runs kubectl v1.37.2 with the cluster's kubeconfig and returns
// its standard output; the error carries standard error. Pass --context to
// pick a server (the current context is the newest).
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlContext(context.Background(), args...)
}

// KubectlContext is Kubectl with a context.
func (c *Cluster) KubectlContext(ctx context.Context, args ...string) (string, error) {
	// A discovery cache per run: a new cluster on the same addresses must
	// not be seen through the last one's cached discovery.
	cmd := exec.CommandContext(ctx, c.bins.kubectl, append([]string{"--kubeconfig=" + c.kubeconfig, "--cache-dir=" + c.KubectlCacheDir()}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// KubectlCacheDir is kubectl's discovery cache for this run; pass it as
// --cache-dir when running kubectl yourself.
func (c *Cluster) KubectlCacheDir() string { return filepath.Join(c.runDir, "kubectl-cache") }

// KubectlBinary is the path of kubectl v1.37.2.
func (c *Cluster) KubectlBinary() string { return c.bins.kubectl }

// Health returns an error naming every component that is not running
// although it was not stopped on purpose.
func (c *Cluster) Health() error {
	var errs []error
	if err := c.etcd.exitErr(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.servers {
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

// ---------------------------------------------------------------- stop

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
		var servers []*process
		for _, s := range c.servers {
			servers = append(servers, s.proc)
		}
		stopAll(servers, 20*time.Second)
		stopAll([]*process{c.etcd}, 10*time.Second)
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

// ---------------------------------------------------------------- TLS helpers

func certPool(pemBytes []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	return pool
}

func tlsClient(ca []byte) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: certPool(ca), MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
}
