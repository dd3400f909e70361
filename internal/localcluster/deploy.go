package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// What artifacts/deploy/base/ declares.
const (
	// APIServiceName is the APIService of peerdiscovery.k8s.io.
	APIServiceName = "v1alpha1.peerdiscovery.k8s.io"
	// APIGroupVersionPath is its discovery path.
	APIGroupVersionPath = "/apis/peerdiscovery.k8s.io/v1alpha1"
	// ExtensionNamespace, ExtensionServiceAccount and ExtensionService
	// are where peerdiscovery-apiserver runs in a real cluster.
	ExtensionNamespace      = "peerdiscovery"
	ExtensionServiceAccount = "peerdiscovery-apiserver"
	ExtensionService        = "peerdiscovery-apiserver"
	// ExtensionEndpointSlice lists the local replicas' addresses: there is
	// no endpointslice controller (no kube-controller-manager) to do it.
	ExtensionEndpointSlice = "peerdiscovery-apiserver-local"

	fieldManager = "local-up"
	manifestDir  = "artifacts/deploy/base"
)

// manifestFiles are applied in this order; the APIService last, once the
// replicas serve.
var manifestFiles = []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "service.yaml", "apiservice.yaml"}

// readManifests decodes every YAML document of the deploy manifests.
func readManifests(dir string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, name := range manifestFiles {
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			js, err := utilyaml.ToJSON(doc)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			js = bytes.TrimSpace(js)
			if len(js) == 0 || string(js) == "null" {
				continue // comments only
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, u)
		}
		f.Close()
	}
	return out, nil
}

// apply server-side-applies objs through the dynamic client, retrying
// transient errors until ctx is done.
func apply(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		what := fmt.Sprintf("%s %s", gvk.Kind, o.GetName())
		if ns := o.GetNamespace(); ns != "" {
			what += " in " + ns
		}
		var lastErr error
		for attempt := 0; ; attempt++ {
			lastErr = func() error {
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					return err
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					ns := o.GetNamespace()
					if ns == "" {
						ns = metav1.NamespaceDefault
					}
					ri = dyn.Resource(m.Resource).Namespace(ns)
				}
				_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
				return err
			}()
			if lastErr == nil {
				break
			}
			if attempt >= 20 || ctx.Err() != nil {
				return fmt.Errorf("applying %s: %w", what, lastErr)
			}
			if rm, ok := mapper.(meta.ResettableRESTMapper); ok {
				rm.Reset()
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

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
	// does: they verify each other with its caBundle, so a follower is not
	// ready before it exists (the aggregator marks it Available once a
	// replica is).
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
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, extReadyTimeout)
	defer cancel()
	client := tlsClient(c.pki.extCA.CertPEM)
	err := c.waitFor(ctx, e.proc, e.name+" /readyz", func(ctx context.Context) (bool, string) {
		return httpOK(ctx, client, c.extEndpoint(e)+"/readyz?verbose")
	})
	if err == nil {
		c.cfg.Logf("%s ready in %s", e.name, time.Since(start).Round(100*time.Millisecond))
	}
	return err
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

// anyServer is the first kube-apiserver not stopped on purpose.
func (c *Cluster) anyServer() (int, error) {
	for i, s := range c.servers {
		if !s.down.Load() {
			return i, nil
		}
	}
	return 0, errors.New("every kube-apiserver is stopped")
}

// WaitExtensionAvailable waits until the APIService is Available and
// /apis/peerdiscovery.k8s.io/v1alpha1 answers through every kube-apiserver
// that is not stopped.
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

func (c *Cluster) extLogPaths() []string {
	var out []string
	for _, e := range c.exts {
		out = append(out, c.logPath(e.name))
	}
	return out
}

func (c *Cluster) ext(i int) (*extReplica, error) {
	if i < 0 || i >= len(c.exts) {
		return nil, fmt.Errorf("no peerdiscovery-apiserver replica %d (the cluster has %d)", i, len(c.exts))
	}
	return c.exts[i], nil
}

func (c *Cluster) adminClientset() (kubernetes.Interface, error) {
	i, err := c.anyServer()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(c.AdminConfig(i))
}

// StopExtension takes replica i out of the EndpointSlice (as the
// endpointslice controller would for a terminating Pod), then stops it
// (SIGTERM, SIGKILL after 15s).
func (c *Cluster) StopExtension(i int) error {
	e, err := c.ext(i)
	if err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	e.down.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if cs, err := c.adminClientset(); err != nil {
		errs = append(errs, err)
	} else if err := c.applyEndpointSlice(ctx, cs); err != nil {
		errs = append(errs, err)
	}
	c.cfg.Logf("stopping %s", e.name)
	errs = append(errs, e.proc.stop(syscall.SIGTERM, 15*time.Second))
	return errors.Join(errs...)
}

// StartExtension starts replica i again, waits for its /readyz and puts it
// back into the EndpointSlice.
func (c *Cluster) StartExtension(i int) error {
	e, err := c.ext(i)
	if err != nil {
		return err
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.stopped.Load() {
		return errors.New("the cluster is stopped")
	}
	c.cfg.Logf("starting %s again", e.name)
	if err := e.proc.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StartTimeout)
	defer cancel()
	if err := c.waitExtensionReady(ctx, e); err != nil {
		return err
	}
	e.down.Store(false)
	cs, err := c.adminClientset()
	if err != nil {
		return err
	}
	return c.applyEndpointSlice(ctx, cs)
}
