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

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/internal/pki"
)

// The stub aggregated API server (./stubapi) in each cost plane.
const (
	stubName      = "bench-stubapi"
	stubNamespace = metav1.NamespaceDefault
	stubPort      = 8443
	// stubSuffix ends the stub's groups; crdSuffix the CRDs' groups.
	stubSuffix = "stub.bench.peerdiscovery.example.com"
	crdSuffix  = "crd.bench.peerdiscovery.example.com"
	// perGroup is how many resources one group-version gets (CRDs and
	// the stub's): peerdiscovery caps a group-version at 2,048 resources
	// (merge.MaxResourcesPerVersion).
	perGroup = 100
)

// buildStub builds ./stubapi into dir.
func buildStub(dir string) (string, error) {
	bin := filepath.Join(dir, "stubapi")
	if out, err := exec.Command("go", "build", "-o", bin, "./stubapi").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building stubapi: %v\n%s", err, out)
	}
	return bin, nil
}

// StartStub runs the stub in the plane's network namespace serving n
// resources (perGroup per group-version, so n rounded up to a multiple of
// it), and registers an APIService for
// each of its group-versions. Stopping the plane stops it.
func StartStub(ctx context.Context, pl *Plane, bin, dir string, n int) error {
	_, err := startStub(ctx, pl, bin, dir, (n+perGroup-1)/perGroup, perGroup)
	return err
}

// stubServer is a plane's running stub.
type stubServer struct {
	// resourcesFile is the stub's --resources-file.
	resourcesFile string
}

// serve makes the stub serve resources per group-version from now on,
// with no restart and no change to its APIServices: a change of an
// aggregated API's resources that no watch shows.
func (s *stubServer) serve(resources int) error {
	return os.WriteFile(s.resourcesFile, []byte(strconv.Itoa(resources)), 0o644)
}

// startStub runs the stub with groups group-versions of resources each
// on pl, and registers them.
func startStub(ctx context.Context, pl *Plane, bin, dir string, groups, resources int) (*stubServer, error) {
	ip := net.ParseIP(pl.C.HelperAddress())
	ca, err := pki.NewCA("bench-stubapi-ca")
	if err != nil {
		return nil, err
	}
	serving, err := ca.NewServingCert(stubName, []string{stubName + "." + stubNamespace + ".svc"}, []net.IP{ip})
	if err != nil {
		return nil, err
	}
	dir = filepath.Join(dir, "stubapi-"+pl.Routing.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	certFile, keyFile, err := serving.Write(dir, "serving", true)
	if err != nil {
		return nil, err
	}
	stub := &stubServer{resourcesFile: filepath.Join(dir, "resources")}
	if _, err := pl.C.RunInNetwork("stubapi", bin,
		"--listen="+net.JoinHostPort(ip.String(), strconv.Itoa(stubPort)),
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile,
		"--client-ca-file="+pl.C.FrontProxyCAFile(),
		"--groups="+strconv.Itoa(groups), "--resources="+strconv.Itoa(resources),
		"--resources-file="+stub.resourcesFile, "--group-suffix="+stubSuffix); err != nil {
		return nil, err
	}
	cfg := pl.C.AdminConfig(0)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: stubName, Namespace: stubNamespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(stubPort)}}},
	}
	if _, err := cs.CoreV1().Services(stubNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: stubName, Namespace: stubNamespace, Labels: map[string]string{discoveryv1.LabelServiceName: stubName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(stubPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(stubNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	for g := range groups {
		group := fmt.Sprintf("g%03d.%s", g, stubSuffix)
		as := &apiregistrationv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: "v1." + group},
			Spec: apiregistrationv1.APIServiceSpec{
				Group: group, Version: "v1", GroupPriorityMinimum: 1000, VersionPriority: 15,
				Service:  &apiregistrationv1.ServiceReference{Namespace: stubNamespace, Name: stubName, Port: ptr.To(int32(443))},
				CABundle: ca.CertPEM,
			},
		}
		if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, as, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	return stub, nil
}

// countGVRs is how many resources kube-apiserver cfg lists in its
// aggregated discovery in groups ending with suffix.
func countGVRs(ctx context.Context, cfg *rest.Config, suffix string) (int, error) {
	client, err := httpClient(cfg)
	if err != nil {
		return 0, err
	}
	defer client.CloseIdleConnections()
	body, err := do(ctx, client, http.MethodGet, url(cfg, "/apis"), nil, http.StatusOK,
		"Accept", discovery.AcceptV2)
	if err != nil {
		return 0, err
	}
	var l apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, err
	}
	n := 0
	for _, g := range l.Items {
		if !strings.HasSuffix(g.Name, "."+suffix) {
			continue
		}
		for _, v := range g.Versions {
			n += len(v.Resources)
		}
	}
	return n, nil
}
