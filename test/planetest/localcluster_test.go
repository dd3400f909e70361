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

package planetest

import (
	"context"
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

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
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
	c, err := localcluster.Start(ctx, localcluster.Config{SubnetOctet: octet, TombstonePeriod: 60 * time.Second, Logf: t.Logf})
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
	if v, i := c.ControllerManagerVersion(); v != localcluster.DefaultServerVersions[0] || i != 0 || c.LogPaths()[localcluster.ControllerManagerName] == "" {
		t.Errorf("kube-controller-manager %q on server %d, want %s on 0 with a log", v, i, localcluster.DefaultServerVersions[0])
	}

	servers := c.Servers()
	if len(servers) != len(localcluster.DefaultServerVersions) {
		t.Fatalf("got %d servers, want %d", len(servers), len(localcluster.DefaultServerVersions))
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
			if _, err := cs.Discovery().RESTClient().Get().AbsPath(localcluster.APIGroupVersionPath).DoRaw(ctx); err != nil {
				t.Errorf("GET %s through %s: %v", localcluster.APIGroupVersionPath, s.Name, err)
			}
			agg, err := aggregatorclient.NewForConfig(c.AdminConfig(i))
			if err != nil {
				t.Fatal(err)
			}
			as, err := agg.ApiregistrationV1().APIServices().Get(ctx, localcluster.APIServiceName, metav1.GetOptions{})
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
				t.Errorf("APIService %s is not Available: %+v", localcluster.APIServiceName, as.Status.Conditions)
			}

			// A user without the reader role is authenticated but denied.
			nobody, err := kubernetes.NewForConfig(c.UserConfig(i, "e2e-nobody", []string{"e2e-group"}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = nobody.Discovery().RESTClient().Get().AbsPath(localcluster.APIGroupVersionPath + "/apiserverpeers").DoRaw(ctx)
			if !apierrors.IsForbidden(err) {
				t.Errorf("listing apiserverpeers as e2e-nobody through %s: got %v, want Forbidden", s.Name, err)
			}
		})
	}

	// kubectl v1.37.2 with the generated kubeconfig, one context per server.
	for _, s := range servers {
		out, err := c.Kubectl("--context", s.Context, "get", "apiservice", localcluster.APIServiceName, "-o", "jsonpath={.status.conditions[?(@.type=='Available')].status}")
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
		// must fails the test at once: the later steps build on this one.
		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		check := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		must("StopAPIServer(0)", c.StopAPIServer(0, syscall.SIGTERM))
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer wcancel()
		check("with kube-apiserver 0 stopped", c.WaitExtensionAvailable(wctx))
		for deadline := time.Now().Add(40 * time.Second); len(c.ControllerManagerRestarts()) == 0; time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kube-controller-manager was not restarted within 40s of losing its only kube-apiserver (log: %s)", c.ControllerManagerLogPath())
			}
		}
		t.Logf("kube-controller-manager restarted: %s", c.ControllerManagerRestarts()[0])
		must("StartAPIServer(0)", c.StartAPIServer(0))
		must("StopExtension(0)", c.StopExtension(0))
		check("with replica 0 stopped", c.WaitExtensionAvailable(wctx))
		must("StopAPIServer(1, SIGKILL)", c.StopAPIServer(1, syscall.SIGKILL))
		must("StartAPIServer(1)", c.StartAPIServer(1))
		must("StartExtension(0)", c.StartExtension(0))
		check("after the restarts", c.WaitExtensionAvailable(wctx))
		check("kube-controller-manager after the restarts", c.WaitControllerManager(wctx))
		check("Health", c.Health())
	})
}
