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

// Command local-up starts a real local mixed-version control plane (etcd,
// one kube-apiserver per --servers version with the peerdiscovery filter
// linked in, peerdiscovery-apiserver replicas behind a real APIService),
// prints a kubeconfig with one context per kube-apiserver and example
// commands, and keeps it up until Ctrl-C or SIGTERM; then it stops every
// process it started and deletes its network namespace, so it can be run
// again. It needs root (ip netns, unshare). See internal/localcluster.
//
// Usually run through hack/local-up.sh, which builds what is missing first.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

func main() {
	var (
		outputDir   = pflag.String("output-dir", "_output", "Folder with the binaries (bin/) and the runs (local-up/<run>/: logs, certificates, kubeconfig).")
		servers     = pflag.StringSlice("servers", localcluster.DefaultServerVersions, "Versions of the kube-apiservers, one per server (e.g. v1.36.3,v1.37.2).")
		replicas    = pflag.Int("extension-replicas", localcluster.DefaultExtensionReplicas, "Replicas of peerdiscovery-apiserver (0: none, no APIService).")
		tombstone   = pflag.Duration("tombstone-period", localcluster.DefaultTombstonePeriod, "peerdiscovery-apiserver --tombstone-period.")
		refresh     = pflag.Duration("refresh-interval", localcluster.DefaultRefreshInterval, "peerdiscovery-apiserver --refresh-interval.")
		octet       = pflag.Int("subnet-octet", localcluster.DefaultSubnetOctet, "Third octet of the cluster's subnet 10.254.<octet>.0/24 (two clusters on one host need different ones).")
		verbosity   = pflag.Int("v", localcluster.DefaultVerbosity, "--v of every component.")
		rebuild     = pflag.Bool("rebuild", false, "Run the hack/build-*.sh scripts even if the binaries exist (they skip up-to-date ones).")
		timeout     = pflag.Duration("timeout", localcluster.DefaultStartTimeout, "How long starting may take (after the builds).")
		extBinary   = pflag.String("extension-binary", "", "Use this peerdiscovery-apiserver binary instead of building ./cmd/peerdiscovery-apiserver.")
		extFlags    = pflag.StringArray("extension-flag", nil, "An extra flag for peerdiscovery-apiserver, e.g. --extension-flag=--v=4 (repeatable).")
		serverBins  = pflag.StringArray("server-binary", nil, "VERSION=PATH: use this kube-apiserver binary for VERSION instead of _output/bin/kube-apiserver-VERSION/kube-apiserver (repeatable).")
		serverFlags = pflag.StringArray("server-flag", nil, "VERSION=FLAG: an extra flag for the kube-apiservers of VERSION, e.g. --server-flag=v1.37.2=--runtime-config=resource.k8s.io/v1beta2=true (repeatable).")
		noKCM       = pflag.Bool("no-controller-manager", false, "Run no kube-controller-manager (by default one of the oldest server's release runs, connected to that server only, as on a node not upgraded yet).")
		kcmFlags    = pflag.StringArray("controller-manager-flag", nil, "An extra flag for kube-controller-manager, e.g. --controller-manager-flag=--v=4 (repeatable).")
		nodes       = pflag.Bool("nodes", false, "Run the plane on nodes, as kubeadm does: a containerd and a kubelet per kube-apiserver, the kube-apiservers as static pods from hack/build-images.sh's images, peerdiscovery-apiserver installed with kubectl apply -k (--extension-* and --server-binary do not apply).")
	)
	pflag.Parse()
	log.SetFlags(log.Ltime)
	log.SetPrefix("local-up: ")

	// Ctrl-C or SIGTERM, during start or later, stops everything.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	extra := map[string][]string{}
	for _, sf := range *serverFlags {
		v, flag, ok := strings.Cut(sf, "=")
		if !ok || !strings.HasPrefix(flag, "--") {
			log.Fatalf("--server-flag %q: want VERSION=--flag[=value]", sf)
		}
		extra[v] = append(extra[v], flag)
	}
	bins := map[string]string{}
	for _, sb := range *serverBins {
		v, path, ok := strings.Cut(sb, "=")
		if !ok || path == "" {
			log.Fatalf("--server-binary %q: want VERSION=PATH", sb)
		}
		bins[v] = path
	}
	cfg := localcluster.Config{
		OutputDir:           *outputDir,
		ExtensionReplicas:   *replicas,
		TombstonePeriod:     *tombstone,
		RefreshInterval:     *refresh,
		SubnetOctet:         *octet,
		Verbosity:           *verbosity,
		Rebuild:             *rebuild,
		ExtensionBinary:     *extBinary,
		ExtensionExtraFlags: *extFlags,
		StartTimeout:        *timeout,
		ControllerManager:   localcluster.ControllerManagerSpec{Disabled: *noKCM, ExtraFlags: *kcmFlags},
		BuildOutput:         os.Stderr,
		LinkKubeconfig:      true,
		Logf:                log.Printf,
	}
	cfg.Nodes.Enabled = *nodes
	if *nodes && !pflag.CommandLine.Changed("timeout") {
		cfg.StartTimeout = 0 // the node-based plane's default
	}
	if *replicas == 0 {
		cfg.ExtensionReplicas = -1
	}
	if *verbosity == 0 {
		cfg.Verbosity = -1
	}
	for _, v := range *servers {
		v = strings.TrimSpace(v)
		cfg.Servers = append(cfg.Servers, localcluster.ServerSpec{Version: v, ExtraFlags: extra[v], Binary: bins[v]})
	}

	start := time.Now()
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		log.Fatalf("start failed: %v", err)
	}
	printUsage(c, time.Since(start))

	health := time.NewTicker(5 * time.Second)
	defer health.Stop()
	warned := ""
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-health.C:
			if err := c.Health(); err != nil && err.Error() != warned {
				warned = err.Error()
				log.Printf("WARNING: %v", err)
			}
		}
	}
	stop() // a second Ctrl-C kills at once
	log.Printf("stopping")
	if err := c.Stop(); err != nil {
		log.Fatalf("stop: %v", err)
	}
	log.Printf("stopped; logs are in %s", filepath.Join(c.RunDir(), "logs"))
}

func printUsage(c *localcluster.Cluster, took time.Duration) {
	kc := c.Kubeconfig()
	if l := c.StableKubeconfig(); l != "" {
		kc = l
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, kc); err == nil && !strings.HasPrefix(rel, "..") {
			kc = rel
		}
	}
	kubectl := c.KubectlBinary()
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, kubectl); err == nil && !strings.HasPrefix(rel, "..") {
			kubectl = "./" + rel
		}
	}
	servers := c.Servers()
	var b strings.Builder
	fmt.Fprintf(&b, "\nLocal control plane is ready (started in %s).\n\n", took.Round(time.Second))
	fmt.Fprintf(&b, "Kubeconfig: %s\n", kc)
	if kc != c.Kubeconfig() {
		fmt.Fprintf(&b, "  (a link to %s)\n", c.Kubeconfig())
	}
	b.WriteString("\nContexts:\n")
	for i, s := range servers {
		fmt.Fprintf(&b, "  %-10s %s  %s  (hostname %s, log %s, audit log %s)\n", s.Context, s.Version, s.Endpoint, s.Name, s.LogPath, c.AuditLogPath(i))
	}
	if v, i := c.ControllerManagerVersion(); v != "" {
		fmt.Fprintf(&b, "\nkube-controller-manager %s, connected to %s only (log %s)\n", v, servers[i].Context, c.ControllerManagerLogPath())
	}
	if nodes := c.Nodes(); len(nodes) > 0 {
		b.WriteString("\nNodes (containerd + kubelet each; kube-apiserver, and on node-0 kube-controller-manager and kube-scheduler, as static pods):\n")
		for _, n := range nodes {
			fmt.Fprintf(&b, "  %s  %s  manifests %s  (kubelet log %s, Pod logs %s)\n", n.Name, n.IP, n.ManifestsDir, n.KubeletLog, n.PodLogsDir)
		}
		fmt.Fprintf(&b, "peerdiscovery-apiserver: Deployment %s/%s, installed with kubectl apply -k %s\n", localcluster.ExtensionNamespace, localcluster.ExtensionDeployment, c.ExtensionOverlayDir())
	}
	if exts := c.Extensions(); len(exts) > 0 {
		b.WriteString("\npeerdiscovery-apiserver replicas:\n")
		for _, e := range exts {
			fmt.Fprintf(&b, "  %s  %s  (log %s)\n", e.Name, e.Endpoint, e.LogPath)
		}
	}
	fmt.Fprintf(&b, "\nNetwork namespace: %s (run commands inside with: ip netns exec %s ...)\n", c.NetworkNamespace(), c.NetworkNamespace())
	fmt.Fprintf(&b, "Use kubectl %s (/usr/bin/kubectl is outside the version skew).\n\nTry:\n", localcluster.KubectlVersion)
	k := fmt.Sprintf("%s --kubeconfig %s", kubectl, kc)
	oldest := servers[0].Context
	if len(c.Nodes()) > 0 {
		fmt.Fprintf(&b, "  %s get pods -A -o wide\n", k)
	}
	if len(c.Extensions()) > 0 || len(c.Nodes()) > 0 {
		fmt.Fprintf(&b, "  %s --context %s get peerroutingtables\n", k, oldest)
		fmt.Fprintf(&b, "  %s --context %s get apiserverpeers\n", k, oldest)
		fmt.Fprintf(&b, "  %s --context %s get --raw /apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries/cluster\n", k, oldest)
		for _, s := range servers {
			fmt.Fprintf(&b, "  %s --context %s get apiservice %s\n", k, s.Context, localcluster.APIServiceName)
		}
		if self, err := os.Executable(); err == nil {
			// hack/local-up.sh builds the plugin beside this binary.
			plugins := filepath.Join(filepath.Dir(self), "kubectl-plugins")
			if _, err := os.Stat(filepath.Join(plugins, "kubectl-peerdiscovery")); err == nil {
				fmt.Fprintf(&b, "  PATH=%s:$PATH %s peerdiscovery status --kubeconfig %s   # also: explain VERB PATH, drain SERVER\n", plugins, kubectl, kc)
			}
		}
	} else {
		fmt.Fprintf(&b, "  %s --context %s get namespaces\n", k, oldest)
	}
	fmt.Fprintf(&b, "  %s --context %s api-resources\n", k, servers[len(servers)-1].Context)
	b.WriteString("\nPress Ctrl-C to stop everything.\n")
	fmt.Print(b.String())
}
