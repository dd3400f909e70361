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
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControllerManagerSpec is the cluster's kube-controller-manager: a plain
// upstream one (hack/build-kube-controller-manager.sh), connected to one
// kube-apiserver only, as on a control-plane node that is not upgraded yet.
// The garbage collector and the namespace controller there decide what to
// delete from that server's discovery and 404s: the reason the filter
// exists. Like a kubelet, the harness restarts it whenever it exits
// (ControllerManagerRestarts says why).
type ControllerManagerSpec struct {
	// Disabled runs no kube-controller-manager.
	Disabled bool
	// Server is the index of the kube-apiserver it talks to (default 0,
	// the oldest).
	Server int
	// Version is its release (default: that server's version). The
	// binary is _output/bin/kube-controller-manager-<Version>/
	// kube-controller-manager.
	Version string
	// Controllers replaces DefaultControllers.
	Controllers []string
	// ExtraFlags are appended to its command line.
	ExtraFlags []string
	// Binary overrides the binary.
	Binary string
}

// DefaultControllers are the controllers that need no nodes, no cloud and
// no signing keys and run cleanly on the local control plane; the namespace
// controller and the garbage collector among them, and what upstream's
// API machinery conformance tests wait for (hack/conformance.sh): resource
// quota status, every namespace's kube-root-ca.crt, and the pods of a
// ReplicationController (created; without a kubelet they never run).
var DefaultControllers = []string{
	"namespace-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"resourcequota-controller",
	"root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller",
	"replicaset-controller",
	"replicationcontroller-controller",
	"deployment-controller",
	"job-controller",
	"cronjob-controller",
	"ttl-after-finished-controller",
}

// ControllerManagerName names the kube-controller-manager in LogPaths.
const ControllerManagerName = "kube-controller-manager"

// completeControllerManager fills in the defaults.
func (c *Config) completeControllerManager() error {
	cm := &c.ControllerManager
	if cm.Disabled {
		return nil
	}
	if cm.Server < 0 || cm.Server >= len(c.Servers) {
		return fmt.Errorf("kube-controller-manager: no kube-apiserver %d (the cluster has %d)", cm.Server, len(c.Servers))
	}
	if cm.Version == "" {
		cm.Version = c.Servers[cm.Server].Version
	}
	if len(cm.Controllers) == 0 {
		cm.Controllers = DefaultControllers
	}
	return nil
}

// controllerManagerArgs is its command line: its own client certificate
// (system:kube-controller-manager), a token per controller
// (--use-service-account-credentials, as kubeadm runs it), leader election
// on, a short quota resync, and no serving port (nothing here scrapes it;
// readiness is the leader Lease).
func (c *Cluster) controllerManagerArgs(kubeconfig string) []string {
	cm := c.cfg.ControllerManager
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=true",
		"--controllers=" + strings.Join(cm.Controllers, ","),
		"--use-service-account-credentials=true",
		"--root-ca-file=" + c.pki.caFile,
		// The quota controller restores a status edited by hand only on its
		// full resync (5 min by default); a conformance test waits for it.
		"--resource-quota-sync-period=15s",
		"--secure-port=0",
		"--v=" + strconv.Itoa(c.cfg.Verbosity),
	}
	return append(args, cm.ExtraFlags...)
}

// startControllerManager writes its kubeconfig, starts it in the cluster's
// network namespace and waits until it holds the leader Lease.
func (c *Cluster) startControllerManager(ctx context.Context) error {
	cm := c.cfg.ControllerManager
	s, err := c.server(cm.Server)
	if err != nil {
		return err
	}
	kp, err := c.pki.ca.NewClientCert("system:kube-controller-manager", nil)
	if err != nil {
		return fmt.Errorf("kube-controller-manager client certificate: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.endpoint(s), CertificateAuthorityData: c.pki.ca.CertPEM}
	cfg.AuthInfos[ControllerManagerName] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: ControllerManagerName}
	cfg.CurrentContext = "local"
	kubeconfig := filepath.Join(c.runDir, ControllerManagerName+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}
	c.kcm = &process{
		name:    ControllerManagerName,
		logPath: c.logPath(ControllerManagerName),
		argv:    c.nsArgv("", append([]string{c.bins.controllerManager}, c.controllerManagerArgs(kubeconfig)...)...),
	}
	c.cfg.Logf("starting kube-controller-manager %s, connected to %s (%s) only", cm.Version, s.name, s.spec.Version)
	if err := c.kcm.start(); err != nil {
		return err
	}
	if err := c.waitFor(ctx, c.kcm, "kube-controller-manager leader election", c.controllerManagerLeads); err != nil {
		return err
	}
	go c.superviseControllerManager()
	return nil
}

// controllerManagerLeads reports whether kube-system/kube-controller-manager
// has a holder that renewed it since the current process started.
func (c *Cluster) controllerManagerLeads(ctx context.Context) (bool, string) {
	admin, err := c.adminClientset()
	if err != nil {
		return false, err.Error()
	}
	_, started := c.kcm.run()
	l, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, ControllerManagerName, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	// The Lease's renewTime has microsecond precision.
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(started.Add(-time.Second)) {
		return false, "no current leader"
	}
	return true, ""
}

// Backoff of the restarts, as the kubelet's crash-loop backoff but capped
// at 10 s: the harness's tests wait for it.
const (
	controllerManagerRestartDelay    = time.Second
	controllerManagerMaxRestartDelay = 10 * time.Second
)

// superviseControllerManager restarts kube-controller-manager whenever it
// exits while the cluster runs, as the kubelet restarts the static pod. It
// exits by design when it cannot renew its leader Lease within
// --leader-elect-renew-deadline (10 s), e.g. while its only kube-apiserver
// restarts; on a slow machine a plain restart of that server takes longer.
func (c *Cluster) superviseControllerManager() {
	delay := controllerManagerRestartDelay
	for {
		done, started := c.kcm.run()
		<-done
		if c.stopped.Load() {
			return
		}
		ran := time.Since(started)
		if ran > 2*controllerManagerMaxRestartDelay {
			delay = controllerManagerRestartDelay // it ran for a while: not a crash loop
		}
		why := fmt.Sprintf("%v after %s", c.kcm.exitErr(), ran.Round(time.Second))
		if last := c.kcm.logErrors(1); last != "" {
			why += "; last error: " + last
		}
		c.kcmMu.Lock()
		c.kcmRestarts++
		c.kcmReasons = append(c.kcmReasons, why)
		if len(c.kcmReasons) > maxRestartReasons {
			c.kcmReasons = c.kcmReasons[len(c.kcmReasons)-maxRestartReasons:]
		}
		c.kcmMu.Unlock()
		c.cfg.Logf("%s; restarting it in %s, as a kubelet would", why, delay)
		time.Sleep(delay)
		delay = min(2*delay, controllerManagerMaxRestartDelay)
		// Under opMu, so that Stop (which sets stopped, then takes opMu)
		// either sees this run and stops it or is seen here.
		c.opMu.Lock()
		if c.stopped.Load() {
			c.opMu.Unlock()
			return
		}
		err := c.kcm.start()
		c.opMu.Unlock()
		if err != nil {
			c.cfg.Logf("restarting kube-controller-manager: %v", err)
			return
		}
	}
}

// maxRestartReasons bounds the reasons kept: a crash loop in a
// long-running local-up restarts it every 10 s.
const maxRestartReasons = 16

// ControllerManagerRestarts lists why the harness restarted
// kube-controller-manager, oldest first: the last maxRestartReasons
// restarts (nil when it never exited).
func (c *Cluster) ControllerManagerRestarts() []string {
	c.kcmMu.Lock()
	defer c.kcmMu.Unlock()
	return append([]string(nil), c.kcmReasons...)
}

func (c *Cluster) controllerManagerRestartCount() int {
	c.kcmMu.Lock()
	defer c.kcmMu.Unlock()
	return c.kcmRestarts
}

// WaitControllerManager waits until kube-controller-manager runs and holds
// its leader Lease (renewed since its latest start). It is a no-op without
// one.
func (c *Cluster) WaitControllerManager(ctx context.Context) error {
	if c.kcm == nil {
		return nil
	}
	return c.waitFor(ctx, nil, "kube-controller-manager leader election", func(ctx context.Context) (bool, string) {
		if err := c.kcm.exitErr(); err != nil {
			return false, err.Error() + " (restart pending)"
		}
		return c.controllerManagerLeads(ctx)
	})
}

// ControllerManagerLogPath is the kube-controller-manager's log ("" when
// the cluster runs none).
func (c *Cluster) ControllerManagerLogPath() string {
	if c.kcm == nil {
		return ""
	}
	return c.kcm.logPath
}

// ControllerManagerVersion is the kube-controller-manager's release and
// the index of the server it talks to ("", -1 when the cluster runs none).
func (c *Cluster) ControllerManagerVersion() (string, int) {
	if c.kcm == nil {
		return "", -1
	}
	return c.cfg.ControllerManager.Version, c.cfg.ControllerManager.Server
}
