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
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// deployExtension applies the deploy manifests, creates the local
// EndpointSlice and the ServiceAccount token, starts the replicas, applies
// the APIService with the generated caBundle, and waits until the replicas
// are ready and the APIService is available through every kube-apiserver.
func (c *Cluster) deployExtension(ctx context.Context) error {
	admin := c.AdminConfig(0)
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))

	objs, err := readManifests(filepath.Join(c.cfg.RepoRoot, manifestDir))
	if err != nil {
		return err
	}
	var first, apiServices []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "APIService" {
			caBundle := base64.StdEncoding.EncodeToString(c.pki.extCA.CertPEM)
			if err := unstructured.SetNestedField(o.Object, caBundle, "spec", "caBundle"); err != nil {
				return err
			}
			apiServices = append(apiServices, o)
			continue
		}
		first = append(first, o)
	}
	c.cfg.Logf("applying %s (%d objects)", manifestDir, len(first))
	if err := apply(ctx, dyn, mapper, first); err != nil {
		return err
	}
	if err := c.applyEndpointSlice(ctx, cs); err != nil {
		return err
	}

	// The replicas' identity: a ServiceAccount token, as in a Pod.
	exp := int64((24 * time.Hour).Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(ExtensionNamespace).CreateToken(ctx, ExtensionServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a token for ServiceAccount %s/%s: %w", ExtensionNamespace, ExtensionServiceAccount, err)
	}
	server := c.endpoint(c.servers[0])
	if !c.cfg.ExtensionDirect {
		c.lb, err = newLoadBalancer(c.net.ip(hostIPSuffix).String(), c.lbBackends)
		if err != nil {
			return fmt.Errorf("starting the load balancer: %w", err)
		}
		server = c.LoadBalancerEndpoint()
	}
	c.extKubeconfig = filepath.Join(c.runDir, "pki", "peerdiscovery-apiserver.kubeconfig")
	if err := c.writeTokenKubeconfig(c.extKubeconfig, server, "system:serviceaccount:"+ExtensionNamespace+":"+ExtensionServiceAccount, tr.Status.Token); err != nil {
		return err
	}

	for _, e := range c.exts {
		e.proc = &process{
			name:    e.name,
			logPath: c.logPath(e.name),
			argv:    c.nsArgv(e.name, append([]string{c.bins.extension}, c.extensionArgs(e)...)...),
		}
		c.cfg.Logf("starting %s on %s (core kube-apiserver %s)", e.name, e.ip, server)
		if err := e.proc.start(); err != nil {
			return err
		}
	}
	// The APIService goes in with the replicas, as `kubectl apply -k`
	// does (the aggregator marks it Available once a replica is ready).
	c.cfg.Logf("applying APIService %s", APIServiceName)
	if err := apply(ctx, dyn, mapper, apiServices); err != nil {
		return err
	}
	for _, e := range c.exts {
		if err := c.waitExtensionReady(ctx, e); err != nil {
			return err
		}
	}
	return c.WaitExtensionAvailable(ctx)
}

func (c *Cluster) extensionArgs(e *extReplica) []string {
	args := []string{
		"--bind-address=" + e.ip.String(),
		"--secure-port=" + strconv.Itoa(securePort),
		"--tls-cert-file=" + c.pki.extServingCert,
		"--tls-private-key-file=" + c.pki.extServingKey,
		"--kubeconfig=" + c.extKubeconfig,
		"--authentication-kubeconfig=" + c.extKubeconfig,
		"--authorization-kubeconfig=" + c.extKubeconfig,
		"--peer-ca-file=" + c.pki.caFile,
		"--refresh-interval=" + c.cfg.RefreshInterval.String(),
		"--scrape-timeout=" + c.cfg.ScrapeTimeout.String(),
		"--tombstone-period=" + c.cfg.TombstonePeriod.String(),
		// Quicker than the defaults (5 s; 15 s/10 s/2 s), as the refresh
		// interval is: the tests restart replicas many times, and a fresh
		// replica waits a lease duration for one with state to lead.
		"--shutdown-delay-duration=2s",
		"--leader-elect-lease-duration=8s",
		"--leader-elect-renew-deadline=6s",
		"--leader-elect-retry-period=1s",
		"--v=" + strconv.Itoa(c.cfg.Verbosity),
	}
	return append(args, c.cfg.ExtensionExtraFlags...)
}

func (c *Cluster) extEndpoint(e *extReplica) string {
	return "https://" + net.JoinHostPort(e.ip.String(), strconv.Itoa(securePort))
}

// lbBackends are the kube-apiservers not stopped on purpose.
func (c *Cluster) lbBackends() []string {
	var out []string
	for _, s := range c.servers {
		if !s.down.Load() {
			out = append(out, net.JoinHostPort(s.ip.String(), strconv.Itoa(securePort)))
		}
	}
	return out
}

// extReadyTimeout bounds the wait for one replica's /readyz (normally a
// second or two; a replica that is not ready by then is usually stuck, e.g.
// on a missing RBAC rule).
const extReadyTimeout = 2 * time.Minute

func (c *Cluster) waitExtensionReady(ctx context.Context, e *extReplica) error {
	ctx, cancel := context.WithTimeout(ctx, extReadyTimeout)
	defer cancel()
	return c.waitReadyz(ctx, e.proc, e.name, c.extensionConfig(e))
}

// applyEndpointSlice writes the EndpointSlice of the extension Service:
// every replica, ready unless stopped on purpose (as the endpointslice
// controller would do for the Pods of a Deployment).
func (c *Cluster) applyEndpointSlice(ctx context.Context, cs kubernetes.Interface) error {
	ac := discoveryv1ac.EndpointSlice(ExtensionEndpointSlice, ExtensionNamespace).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: ExtensionService,
			discoveryv1.LabelManagedBy:   fieldManager,
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithPorts(discoveryv1ac.EndpointPort().WithName("https").WithPort(securePort).WithProtocol(corev1.ProtocolTCP))
	for _, e := range c.exts {
		ready := !e.down.Load()
		ac.WithEndpoints(discoveryv1ac.Endpoint().
			WithAddresses(e.ip.String()).
			WithHostname(e.name).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(ready).WithServing(ready)))
	}
	_, err := cs.DiscoveryV1().EndpointSlices(ExtensionNamespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying EndpointSlice %s/%s: %w", ExtensionNamespace, ExtensionEndpointSlice, err)
	}
	return nil
}

// WaitExtensionAvailable waits until the APIService is Available,
// /apis/peerdiscovery.k8s.io/v1alpha1 answers through every kube-apiserver
// that is not stopped, and each one's aggregated discovery (what kubectl
// reads) lists the group's resources as fresh. The last is separate
// because kube-aggregator fills its discovery asynchronously: a fetch
// that failed while the extension rolled out leaves the group listed
// stale and without resources until a retry, whose backoff can exceed
// the time the APIService takes to turn Available.
func (c *Cluster) WaitExtensionAvailable(ctx context.Context) error {
	start := time.Now()
	type target struct {
		name string
		cs   kubernetes.Interface
	}
	var targets []target
	for i, s := range c.servers {
		if s.down.Load() {
			continue
		}
		cs, err := kubernetes.NewForConfig(c.AdminConfig(i))
		if err != nil {
			return err
		}
		targets = append(targets, target{s.name, cs})
	}
	i, err := c.anyServer()
	if err != nil {
		return err
	}
	agg, err := aggregatorclient.NewForConfig(c.AdminConfig(i))
	if err != nil {
		return err
	}
	err = c.waitFor(ctx, nil, "APIService "+APIServiceName+" to be Available through every kube-apiserver", func(ctx context.Context) (bool, string) {
		as, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		available := false
		detail := "no Available condition"
		for _, cond := range as.Status.Conditions {
			if cond.Type == apiregistrationv1.Available {
				available = cond.Status == apiregistrationv1.ConditionTrue
				detail = fmt.Sprintf("Available=%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		if !available {
			return false, detail
		}
		var bad []string
		for _, t := range targets {
			if _, err := t.cs.Discovery().RESTClient().Get().AbsPath(APIGroupVersionPath).DoRaw(ctx); err != nil {
				bad = append(bad, fmt.Sprintf("GET %s through %s: %v", APIGroupVersionPath, t.name, err))
				continue
			}
			if err := aggregatedDiscoveryLists(ctx, t.cs, apiGroup, apiVersion); err != nil {
				bad = append(bad, fmt.Sprintf("aggregated discovery through %s: %v", t.name, err))
				continue
			}
			if err := filterSynced(ctx, t.cs); err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", t.name, err))
			}
		}
		if len(bad) > 0 {
			return false, strings.Join(bad, "; ")
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("%w\n(peerdiscovery-apiserver logs: %s)", err, strings.Join(c.extLogPaths(), ", "))
	}
	c.cfg.Logf("APIService %s available through %d kube-apiserver(s) in %s", APIServiceName, len(targets), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// aggregatedDiscoveryLists checks that cs's aggregated /apis lists
// group/version with resources and not marked stale.
func aggregatedDiscoveryLists(ctx context.Context, cs kubernetes.Interface, group, version string) error {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/apis").
		SetHeader("Accept", discovery.AcceptV2).DoRaw(ctx)
	if err != nil {
		return err
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("decoding /apis: %w", err)
	}
	for _, g := range list.Items {
		if g.Name != group {
			continue
		}
		for _, v := range g.Versions {
			switch {
			case v.Version != version:
			case v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale:
				return fmt.Errorf("%s/%s listed as %s", group, version, v.Freshness)
			case len(v.Resources) == 0:
				return fmt.Errorf("%s/%s listed without resources", group, version)
			default:
				return nil
			}
		}
	}
	return fmt.Errorf("%s/%s not listed", group, version)
}

func (c *Cluster) extLogPaths() []string {
	var out []string
	for _, e := range c.exts {
		out = append(out, c.logPath(e.name))
	}
	return out
}

// filterSynced fails while the filter of the kube-apiserver behind cs, if
// it runs one, routes from empty caches. Its /readyz passes 5 s after its
// start without them (a cluster without peerdiscovery-apiserver must come
// up), so a plane whose extension came up late is not ready until then:
// under a loaded CI machine, upstream's conformance tests once began
// through a v1.36.3 server whose filter synced a second later.
func filterSynced(ctx context.Context, cs kubernetes.Interface) error {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading /metrics: %w", err)
	}
	metrics := string(body)
	if strings.Contains(metrics, "\npeerdiscovery_filter_enabled 1") && !strings.Contains(metrics, "\npeerdiscovery_filter_cache_synced 1") {
		return errors.New("the peerdiscovery filter's routing caches are not synced")
	}
	return nil
}
