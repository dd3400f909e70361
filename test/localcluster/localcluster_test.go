package localcluster

import (
	"context"
	"crypto/x509"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// e2eSubnetOctet keeps the test's cluster (10.254.78.0/24) apart from a
// hack/local-up.sh cluster (10.254.77.0/24) on the same machine;
// PEERDISCOVERY_E2E_SUBNET_OCTET overrides it.
const e2eSubnetOctet = 78

// TestLocalCluster starts the real cluster (building what is missing:
// ~2 min for etcd, ~9 min per kube-apiserver version on 2 cores), then
// checks every kube-apiserver's /readyz, the APIService, the group through
// every server, and that RBAC applies to it.
func TestLocalCluster(t *testing.T) {
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		t.Skip("set PEERDISCOVERY_E2E=1 to start a real local control plane (needs root, ip netns, unshare; builds the binaries if missing)")
	}
	octet := e2eSubnetOctet
	if v := os.Getenv("PEERDISCOVERY_E2E_SUBNET_OCTET"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("PEERDISCOVERY_E2E_SUBNET_OCTET=%q: %v", v, err)
		}
		octet = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()

	start := time.Now()
	c, err := Start(ctx, Config{SubnetOctet: octet, TombstonePeriod: 60 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if _, err := os.Stat("/run/netns/" + c.NetworkNamespace()); err == nil {
			t.Errorf("network namespace %s still exists after Stop", c.NetworkNamespace())
		}
	})
	t.Logf("started in %s; kubeconfig %s", time.Since(start).Round(time.Second), c.Kubeconfig())

	// The default cluster runs a kube-controller-manager of the oldest
	// release against the oldest server; Start waited for its leader Lease.
	if v, i := c.ControllerManagerVersion(); v != DefaultServerVersions[0] || i != 0 || c.LogPaths()[controllerManagerName] == "" {
		t.Errorf("kube-controller-manager %q on server %d, want %s on 0 with a log", v, i, DefaultServerVersions[0])
	}

	servers := c.Servers()
	if len(servers) != len(DefaultServerVersions) {
		t.Fatalf("got %d servers, want %d", len(servers), len(DefaultServerVersions))
	}
	for i, s := range servers {
		t.Run(s.Context, func(t *testing.T) {
			cs, err := kubernetes.NewForConfig(c.AdminConfig(i))
			if err != nil {
				t.Fatal(err)
			}
			body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
			if err != nil {
				t.Fatalf("/readyz: %v\n%s", err, body)
			}
			v, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if v.GitVersion != s.Version {
				t.Errorf("/version of %s is %s, want %s", s.Name, v.GitVersion, s.Version)
			}
			if _, err := cs.Discovery().RESTClient().Get().AbsPath(APIGroupVersionPath).DoRaw(ctx); err != nil {
				t.Errorf("GET %s through %s: %v", APIGroupVersionPath, s.Name, err)
			}
			agg, err := aggregatorclient.NewForConfig(c.AdminConfig(i))
			if err != nil {
				t.Fatal(err)
			}
			as, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			available := false
			for _, cond := range as.Status.Conditions {
				if cond.Type == apiregistrationv1.Available && cond.Status == apiregistrationv1.ConditionTrue {
					available = true
				}
			}
			if !available {
				t.Errorf("APIService %s is not Available: %+v", APIServiceName, as.Status.Conditions)
			}

			// A user without the reader role is authenticated but denied.
			nobody, err := kubernetes.NewForConfig(c.UserConfig(i, "e2e-nobody", []string{"e2e-group"}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = nobody.Discovery().RESTClient().Get().AbsPath(APIGroupVersionPath + "/apiserverpeers").DoRaw(ctx)
			if !apierrors.IsForbidden(err) {
				t.Errorf("listing apiserverpeers as e2e-nobody through %s: got %v, want Forbidden", s.Name, err)
			}
		})
	}

	// kubectl v1.37.2 with the generated kubeconfig, one context per server.
	for _, s := range servers {
		out, err := c.Kubectl("--context", s.Context, "get", "apiservice", APIServiceName, "-o", "jsonpath={.status.conditions[?(@.type=='Available')].status}")
		if err != nil {
			t.Errorf("kubectl: %v", err)
		} else if strings.TrimSpace(out) != "True" {
			t.Errorf("kubectl --context %s get apiservice: Available=%q", s.Context, out)
		}
	}
	if t.Failed() {
		return
	}

	// The harness's restart API: the extension server keeps working while
	// kube-apiserver 0 (its first core server) is down, and both come back.
	// kube-apiserver 0 is also kube-controller-manager's only server: held
	// down past its leader renew deadline (10 s), kube-controller-manager
	// exits, and the harness restarts it as a kubelet would.
	t.Run("restart", func(t *testing.T) {
		if err := c.StopAPIServer(0, syscall.SIGTERM); err != nil {
			t.Fatalf("StopAPIServer(0): %v", err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer wcancel()
		if err := c.WaitExtensionAvailable(wctx); err != nil {
			t.Errorf("with kube-apiserver 0 stopped: %v", err)
		}
		for deadline := time.Now().Add(40 * time.Second); len(c.ControllerManagerRestarts()) == 0; time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kube-controller-manager was not restarted within 40s of losing its only kube-apiserver (log: %s)", c.ControllerManagerLogPath())
			}
		}
		t.Logf("kube-controller-manager restarted: %s", c.ControllerManagerRestarts()[0])
		if err := c.StartAPIServer(0); err != nil {
			t.Fatalf("StartAPIServer(0): %v", err)
		}
		if err := c.StopExtension(0); err != nil {
			t.Fatalf("StopExtension(0): %v", err)
		}
		if err := c.WaitExtensionAvailable(wctx); err != nil {
			t.Errorf("with replica 0 stopped: %v", err)
		}
		if err := c.StopAPIServer(1, syscall.SIGKILL); err != nil {
			t.Fatalf("StopAPIServer(1, SIGKILL): %v", err)
		}
		if err := c.StartAPIServer(1); err != nil {
			t.Fatalf("StartAPIServer(1): %v", err)
		}
		if err := c.StartExtension(0); err != nil {
			t.Fatalf("StartExtension(0): %v", err)
		}
		if err := c.WaitExtensionAvailable(wctx); err != nil {
			t.Errorf("after the restarts: %v", err)
		}
		if err := c.WaitControllerManager(wctx); err != nil {
			t.Errorf("kube-controller-manager after the restarts: %v", err)
		}
		if err := c.Health(); err != nil {
			t.Errorf("Health: %v", err)
		}
	})
}

// TestPKI checks the generated certificates chain to their CAs with the
// names the components verify.
func TestPKI(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ca.Cert.Verify(x509VerifyOptions(p.ca, "")); err != nil {
		t.Errorf("CA does not verify against itself: %v", err)
	}
	if _, _, err := p.kubeAPIServerCert("kube-apiserver-0", nil); err != nil {
		t.Fatal(err)
	}
	kas, err := p.ca.NewServingCert("kas", kubernetesDNSNames, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kas.Cert.Verify(x509VerifyOptions(p.ca, "kubernetes.default.svc")); err != nil {
		t.Errorf("kube-apiserver serving certificate: %v", err)
	}
	ext, err := p.extCA.NewServingCert("ext", []string{extServiceDNS}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ext.Cert.Verify(x509VerifyOptions(p.extCA, extServiceDNS)); err != nil {
		t.Errorf("extension serving certificate: %v", err)
	}
	if _, err := ext.Cert.Verify(x509VerifyOptions(p.ca, extServiceDNS)); err == nil {
		t.Errorf("extension serving certificate verifies against the cluster CA, want only its own CA")
	}
	u, err := p.ca.NewClientCert("alice", []string{"g1", "g2"})
	if err != nil {
		t.Fatal(err)
	}
	if u.Cert.Subject.CommonName != "alice" || strings.Join(u.Cert.Subject.Organization, ",") != "g1,g2" {
		t.Errorf("client certificate subject = %v", u.Cert.Subject)
	}
}

func TestSubnetAddresses(t *testing.T) {
	sn := subnet(77)
	if sn.String() != "10.254.77.0/24" {
		t.Errorf("subnet(77) = %s", sn)
	}
	n := &network{Octet: 77}
	if got := n.ip(kubeIPSuffixBase + 1).String(); got != "10.254.77.11" {
		t.Errorf("ip = %s", got)
	}
}

func x509VerifyOptions(ca *KeyPair, dnsName string) x509.VerifyOptions {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return x509.VerifyOptions{Roots: pool, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
}

func TestAssignContextNames(t *testing.T) {
	servers := []*kubeServer{
		{index: 0, spec: ServerSpec{Version: "v1.36.3"}},
		{index: 1, spec: ServerSpec{Version: "v1.37.2"}},
		{index: 2, spec: ServerSpec{Version: "v1.37.2"}},
	}
	assignContextNames(servers)
	got := []string{servers[0].context, servers[1].context, servers[2].context}
	want := []string{"v1.36.3", "v1.37.2-1", "v1.37.2-2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("contexts = %v, want %v", got, want)
	}
	if i := newestServer(servers); i != 2 {
		t.Errorf("newest = %d, want 2", i)
	}
}

func TestReadManifests(t *testing.T) {
	root, err := findRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := readManifests(root + "/" + manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "Service", "APIService", "ClusterRole"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in %s (got %v)", k, manifestDir, kinds)
		}
	}
	if objs[0].GetKind() != "Namespace" {
		t.Errorf("first object is a %s, want the Namespace", objs[0].GetKind())
	}
}

func TestLogErrors(t *testing.T) {
	path := t.TempDir() + "/x.log"
	log := strings.Join([]string{
		"I1129 10:00:00.000000 1 a.go:1] fine",
		`E1129 10:00:01.000000 1 reflector.go:227] "Failed to watch" err="forbidden"`,
		"I1129 10:00:02.000000 1 healthz.go:311] informer-sync check failed",
		`E1129 10:00:03.000000 1 reflector.go:227] "Failed to watch" err="forbidden"`,
		`E1129 10:00:04.000000 1 other.go:1] boom`,
		"",
	}, "\n")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &process{logPath: path}
	got := p.logErrors(10)
	want := `E1129 10:00:03.000000 1 reflector.go:227] "Failed to watch" err="forbidden"` + "\n" + `E1129 10:00:04.000000 1 other.go:1] boom`
	if got != want {
		t.Errorf("logErrors =\n%s\nwant\n%s", got, want)
	}
}
