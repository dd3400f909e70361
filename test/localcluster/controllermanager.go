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
// exists.
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
// controller and the garbage collector among them.
var DefaultControllers = []string{
	"namespace-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"clusterrole-aggregation-controller",
	"replicaset-controller",
	"deployment-controller",
	"job-controller",
	"cronjob-controller",
	"ttl-after-finished-controller",
}

// controllerManagerName names its process, log and credentials.
const controllerManagerName = "kube-controller-manager"

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
// on, and no serving port (nothing here scrapes it; readiness is the
// leader Lease).
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
	cfg.AuthInfos[controllerManagerName] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: controllerManagerName}
	cfg.CurrentContext = "local"
	kubeconfig := filepath.Join(c.runDir, controllerManagerName+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}
	c.kcm = &process{
		name:    controllerManagerName,
		logPath: c.logPath(controllerManagerName),
		argv:    c.nsArgv("", append([]string{c.bins.controllerManager}, c.controllerManagerArgs(kubeconfig)...)...),
	}
	c.cfg.Logf("starting kube-controller-manager %s, connected to %s (%s) only", cm.Version, s.name, s.spec.Version)
	if err := c.kcm.start(); err != nil {
		return err
	}
	return c.waitControllerManagerLeader(ctx)
}

// waitControllerManagerLeader waits until kube-system/kube-controller-manager
// has a holder that renewed it since the process started.
func (c *Cluster) waitControllerManagerLeader(ctx context.Context) error {
	admin, err := c.adminClientset()
	if err != nil {
		return err
	}
	since := time.Now().Add(-time.Second)
	return c.waitFor(ctx, c.kcm, "kube-controller-manager leader election", func(ctx context.Context) (bool, string) {
		l, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, controllerManagerName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(since) {
			return false, "no current leader"
		}
		return true, ""
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
