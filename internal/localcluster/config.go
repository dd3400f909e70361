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
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Versions of the binaries, as in hack/lib/common.sh.
const (
	EtcdVersion    = "v3.7.3"
	KubectlVersion = "v1.37.2"
)

// DefaultServerVersions are the kube-apiservers of a default cluster, the
// oldest first (hack/lib/common.sh KUBE_VERSIONS).
var DefaultServerVersions = []string{"v1.36.3", "v1.37.2"}

// Defaults of Config.
const (
	DefaultSubnetOctet       = 77
	DefaultExtensionReplicas = 2
	DefaultTombstonePeriod   = 60 * time.Second
	DefaultRefreshInterval   = 2 * time.Second
	DefaultScrapeTimeout     = 2 * time.Second
	DefaultStartTimeout      = 5 * time.Minute
	DefaultVerbosity         = 2
	DefaultKeepRuns          = 5
)

// ServerSpec is one kube-apiserver of the cluster.
type ServerSpec struct {
	// Version is a Kubernetes release, e.g. "v1.37.2"; the binary is
	// _output/bin/kube-apiserver-<Version>/kube-apiserver, built with
	// hack/build-kube-apiserver.sh if missing.
	Version string
	// ExtraFlags are appended to the kube-apiserver command line (later
	// flags win), e.g. "--runtime-config=resource.k8s.io/v1beta2=true".
	ExtraFlags []string
	// Binary overrides the kube-apiserver binary.
	Binary string
	// OmitPeerFlags leaves out --peer-ca-file, --peer-advertise-ip and
	// --peer-advertise-port, for a plain upstream kube-apiserver with no
	// peer proxy at all (upstream rejects them while its own gate is off).
	OmitPeerFlags bool
	// Env is added to the kube-apiserver's environment, e.g.
	// "HTTP2_READ_IDLE_TIMEOUT_SECONDS=10" (apimachinery's HTTP/2 health
	// check of every client the server makes, the filter's included).
	Env []string
}

// Config describes a local cluster. The zero value is a usable default
// (v1.36.3 + v1.37.2, two extension replicas, subnet 10.254.77.0/24).
type Config struct {
	// OutputDir holds the binaries (bin/) and the runs (local-up/<run>/).
	// Default: <repository>/_output (PEERDISCOVERY_OUTPUT_DIR if set).
	OutputDir string
	// RepoRoot is the checkout of sigs.k8s.io/peerdiscovery (hack scripts,
	// manifests, cmd/peerdiscovery-apiserver). Default: found upwards from
	// the working directory, else from this source file.
	RepoRoot string

	// Servers are the kube-apiservers. Default: DefaultServerVersions.
	Servers []ServerSpec

	// ControllerManager is the kube-controller-manager (by default one of
	// the oldest server's release, connected to that server only).
	ControllerManager ControllerManagerSpec

	// ExtensionReplicas is the number of peerdiscovery-apiserver
	// replicas (0: DefaultExtensionReplicas; negative: none, and the
	// APIService is not registered).
	ExtensionReplicas int
	// TombstonePeriod, RefreshInterval and ScrapeTimeout are handed to
	// peerdiscovery-apiserver (0: the defaults above).
	TombstonePeriod time.Duration
	RefreshInterval time.Duration
	ScrapeTimeout   time.Duration
	// ExtensionExtraFlags are appended to the peerdiscovery-apiserver
	// command line.
	ExtensionExtraFlags []string
	// ExtensionDirect makes the extension replicas talk to the first
	// kube-apiserver directly instead of through the host-side TCP load
	// balancer over every kube-apiserver (then stopping kube-apiserver 0
	// cuts the extension server off the cluster).
	ExtensionDirect bool

	// SubnetOctet is the third octet of the cluster's subnet
	// 10.254.<SubnetOctet>.0/24 (0: DefaultSubnetOctet). Two clusters on
	// one host need different octets.
	SubnetOctet int

	// Verbosity is --v of every component (0: DefaultVerbosity; negative:
	// 0).
	Verbosity int
	// StartTimeout bounds Start after the binaries are built (0:
	// DefaultStartTimeout).
	StartTimeout time.Duration
	// KeepRuns is how many finished run folders (logs, certificates) are
	// kept under OutputDir/local-up (0: DefaultKeepRuns).
	KeepRuns int

	// Rebuild runs the hack/build-*.sh scripts even when the binaries
	// exist (they skip up-to-date binaries; kube-apiserver's cache key
	// covers the filter's sources). By default only missing binaries are
	// built. peerdiscovery-apiserver is always (incrementally) rebuilt
	// with go build unless ExtensionBinary is set.
	Rebuild bool
	// EtcdBinary, KubectlBinary and ExtensionBinary override the binaries.
	EtcdBinary      string
	KubectlBinary   string
	ExtensionBinary string
	// BuildOutput receives the output of the builds (default: kept and
	// shown only when a build fails).
	BuildOutput io.Writer

	// Nodes runs the kube-apiservers as static pods on nodes with a real
	// kubelet and containerd, and the extension as a Deployment (see
	// NodesSpec); off by default.
	Nodes NodesSpec

	// LinkKubeconfig makes OutputDir/local-up/kubeconfig a link to this
	// run's kubeconfig (cmd/local-up does; tests usually should not, so a
	// developer's running local-up keeps its link).
	LinkKubeconfig bool

	// Logf reports progress (default: silent), e.g. t.Logf or log.Printf.
	Logf func(format string, args ...any)
}

// outputDir is OutputDir, else PEERDISCOVERY_OUTPUT_DIR, else the
// repository's _output, made absolute.
func (c *Config) outputDir() (string, error) {
	d := c.OutputDir
	if d == "" {
		d = os.Getenv("PEERDISCOVERY_OUTPUT_DIR")
	}
	if d == "" {
		root := c.RepoRoot
		if root == "" {
			var err error
			if root, err = findRepoRoot(); err != nil {
				return "", err
			}
		}
		d = filepath.Join(root, "_output")
	}
	return filepath.Abs(d)
}

// complete fills in the defaults and validates.
func (c *Config) complete() error {
	if c.RepoRoot == "" {
		root, err := findRepoRoot()
		if err != nil {
			return err
		}
		c.RepoRoot = root
	}
	var err error
	if c.OutputDir, err = c.outputDir(); err != nil {
		return err
	}
	if len(c.Servers) == 0 {
		for _, v := range DefaultServerVersions {
			c.Servers = append(c.Servers, ServerSpec{Version: v})
		}
	}
	if len(c.Servers) > maxKubeAPIServers {
		return fmt.Errorf("at most %d kube-apiservers, got %d", maxKubeAPIServers, len(c.Servers))
	}
	for i, s := range c.Servers {
		if _, err := utilversion.ParseSemantic(s.Version); err != nil || !strings.HasPrefix(s.Version, "v") {
			return fmt.Errorf("server %d: version %q is not a release version vX.Y.Z", i, s.Version)
		}
	}
	if err := c.completeNodes(); err != nil {
		return err
	}
	if err := c.completeControllerManager(); err != nil {
		return err
	}
	if c.ExtensionReplicas == 0 {
		c.ExtensionReplicas = DefaultExtensionReplicas
	}
	if c.ExtensionReplicas < 0 {
		c.ExtensionReplicas = 0
	}
	if c.ExtensionReplicas > maxExtReplicas {
		return fmt.Errorf("at most %d extension replicas, got %d", maxExtReplicas, c.ExtensionReplicas)
	}
	if c.TombstonePeriod == 0 {
		c.TombstonePeriod = DefaultTombstonePeriod
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.ScrapeTimeout == 0 {
		c.ScrapeTimeout = DefaultScrapeTimeout
	}
	if c.SubnetOctet == 0 {
		c.SubnetOctet = DefaultSubnetOctet
	}
	if c.SubnetOctet < 1 || c.SubnetOctet > 254 {
		return fmt.Errorf("subnet octet must be in [1, 254], got %d", c.SubnetOctet)
	}
	if c.Verbosity == 0 {
		c.Verbosity = DefaultVerbosity
	}
	if c.Verbosity < 0 {
		c.Verbosity = 0
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.KeepRuns == 0 {
		c.KeepRuns = DefaultKeepRuns
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// findRepoRoot looks for the go.mod of sigs.k8s.io/peerdiscovery upwards
// from the working directory, then from this source file.
func findRepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
				bytes.Contains(b, []byte("module sigs.k8s.io/peerdiscovery\n")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("cannot find the sigs.k8s.io/peerdiscovery checkout from %v; set Config.RepoRoot", starts)
}

// binaries are the resolved paths of every binary a cluster runs.
type binaries struct {
	etcd, kubectl, extension string
	kubeAPIServer            map[string]string // version -> path
	controllerManager        string            // "" when disabled
}

func (c *Config) binDir() string { return filepath.Join(c.OutputDir, "bin") }

// buildMu serializes builds within this process (the scripts also lock
// across processes).
var buildMu sync.Mutex

// resolveBinaries finds, and builds if missing (or Rebuild), every binary.
func (c *Config) resolveBinaries(ctx context.Context) (*binaries, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	b := &binaries{kubeAPIServer: map[string]string{}}
	bin := c.binDir()

	// resolve is override if set, else built, which the hack script name
	// builds first if it is missing (or Rebuild).
	resolve := func(override, built, what, hint, name string, args ...string) (string, error) {
		if override != "" {
			return override, nil
		}
		if _, err := os.Stat(built); err == nil && !c.Rebuild {
			return built, nil
		}
		c.Logf("building %s with hack/%s (%s)", what, name, hint)
		return built, c.runBuild(ctx, what, filepath.Join(c.RepoRoot, "hack", name), args...)
	}

	var err error
	if b.etcd, err = resolve(c.EtcdBinary, filepath.Join(bin, "etcd-"+EtcdVersion, "etcd"),
		"etcd "+EtcdVersion, "~2 min cold", "build-etcd.sh"); err != nil {
		return nil, err
	}
	if b.kubectl, err = resolve(c.KubectlBinary, filepath.Join(bin, "kubectl-"+KubectlVersion, "kubectl"),
		"kubectl "+KubectlVersion, "~3 min cold", "build-kubectl.sh"); err != nil {
		return nil, err
	}
	for _, s := range c.Servers {
		if _, done := b.kubeAPIServer[s.Version]; done && s.Binary == "" {
			continue
		}
		p, err := resolve(s.Binary, filepath.Join(bin, "kube-apiserver-"+s.Version, "kube-apiserver"),
			"kube-apiserver "+s.Version, "~9 min cold on 2 cores", "build-kube-apiserver.sh", s.Version)
		if err != nil {
			return nil, err
		}
		if s.Binary == "" {
			b.kubeAPIServer[s.Version] = p
		}
	}
	if cm := c.ControllerManager; !cm.Disabled {
		if b.controllerManager, err = resolve(cm.Binary, filepath.Join(bin, "kube-controller-manager-"+cm.Version, "kube-controller-manager"),
			"kube-controller-manager "+cm.Version, "a few minutes cold", "build-kube-controller-manager.sh", cm.Version); err != nil {
			return nil, err
		}
	}
	b.extension = c.ExtensionBinary
	if b.extension == "" && c.ExtensionReplicas > 0 {
		b.extension = filepath.Join(bin, "peerdiscovery-apiserver")
		tmp := fmt.Sprintf("%s.tmp.%d", b.extension, os.Getpid())
		c.Logf("building peerdiscovery-apiserver (CGO_ENABLED=0 go build -trimpath ./cmd/peerdiscovery-apiserver)")
		// Static, as hack/build-all.sh and the release builds of
		// kube-apiserver are: one compile of the libraries serves them all.
		if err := c.runBuild(ctx, "peerdiscovery-apiserver", "env", "CGO_ENABLED=0", "go", "build", "-trimpath", "-o", tmp, "./cmd/peerdiscovery-apiserver"); err != nil {
			os.Remove(tmp)
			return nil, err
		}
		if err := os.Rename(tmp, b.extension); err != nil {
			return nil, err
		}
	}
	for _, p := range []string{b.etcd, b.kubectl, b.extension, b.controllerManager} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("binary missing after build: %w", err)
		}
	}
	return b, nil
}

// runBuild runs a build command in the repository with the output folder
// exported to the hack scripts.
func (c *Config) runBuild(ctx context.Context, what, name string, args ...string) error {
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	// Its own process group, so cancelling stops the whole build (go
	// build, the compilers), not only the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = c.RepoRoot
	cmd.Env = append(os.Environ(), "PEERDISCOVERY_OUTPUT_DIR="+c.OutputDir)
	var buf bytes.Buffer
	var out io.Writer = &buf
	if c.BuildOutput != nil {
		out = io.MultiWriter(&buf, c.BuildOutput)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s (%s %s): %w\n%s", what, name, strings.Join(args, " "), err, lastLines(buf.String(), 40))
	}
	c.Logf("built %s in %s", what, time.Since(start).Round(time.Second))
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
