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

// Package relist measures what one relist of a filter's routing caches
// costs at the stated scale (5 peers × 5,000 GVRs): a real kube-apiserver
// v1.37.2 with the filter, whose informers watch peerdiscovery.k8s.io
// through its aggregator, and peerdiscovery-apiserver replicas run in this
// process (the REST storage and the generic apiserver, views published
// directly: the engine is not what is measured) behind the APIService's
// Service. Each replica keeps its own resourceVersions, as independent
// replicas do. The filter's watches are moved from one replica to the next
// (the EndpointSlice names the next one, the previous one ends its
// watches, as a replica that stops or a watch timeout does): the reflector
// re-watches with the first replica's resourceVersion, gets 410 and
// relists from the second. Reported per relist: the bytes the new replica
// sent, the time until its last byte, and the CPU seconds of the
// kube-apiserver and of this process (the replica's side) above their idle
// rate. On demand only: PEERDISCOVERY_SCALE_E2E=1 hack/measure-relist.sh.
package relist

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/apiserver"
	"sigs.k8s.io/peerdiscovery/pkg/cmd/server"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/discoverydocs"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// octet is this package's subnet, 10.254.94.0/24 (test/upgradedrill has
// 86 and 87); the host side of its veth pair is .1, where the
// kube-apiserver reaches this process.
const octet = 94

// relists is how many times the filter's watches are moved.
const relists = 3

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Gate:         "PEERDISCOVERY_SCALE_E2E",
		Skipped:      "the relist measurement runs on demand: PEERDISCOVERY_SCALE_E2E=1 (hack/measure-relist.sh)",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			spec := localcluster.ServerSpec{Version: "v1.37.2"}
			// RELIST_WATCHLIST=false measures client-go's LIST path
			// instead of its default watch-list.
			if v := os.Getenv("RELIST_WATCHLIST"); v != "" {
				spec.Env = []string{"KUBE_FEATURE_WatchListClient=" + v}
			}
			return localcluster.Config{
				Servers:           []localcluster.ServerSpec{spec},
				ExtensionReplicas: -1,
				ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
				SubnetOctet:       octet,
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

// countingListener counts the bytes its connections write (TLS records).
type countingListener struct {
	net.Listener
	written *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, written: l.written}, nil
}

type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// replica is a peerdiscovery-apiserver running in this process.
type replica struct {
	srv     *apiserver.Server
	port    int32
	written atomic.Int64
}

const serviceDNS = localcluster.ExtensionService + "." + localcluster.ExtensionNamespace + ".svc"

func hostIP() string { return fmt.Sprintf("10.254.%d.1", octet) }

// startReplica serves on the host side of the plane's veth, with the
// self-signed certificate in certDir (made by the first replica) for the
// Service's DNS name, delegating authentication and authorization to the
// kube-apiserver.
func startReplica(t *testing.T, certDir string) *replica {
	t.Helper()
	o := server.NewOptions()
	o.Engine = nil
	o.ShutdownDelay = 0
	o.AlternateDNS = []string{serviceDNS}
	ln, err := net.Listen("tcp", net.JoinHostPort(hostIP(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{port: int32(ln.Addr().(*net.TCPAddr).Port)}
	ro := o.RecommendedOptions
	ro.SecureServing.Listener = countingListener{Listener: ln, written: &r.written}
	ro.SecureServing.BindPort = int(r.port)
	ro.SecureServing.BindAddress = net.ParseIP(hostIP())
	ro.SecureServing.ServerCert.CertDirectory = certDir
	kubeconfig := cluster.Kubeconfig()
	ro.CoreAPI.CoreAPIKubeconfigPath = kubeconfig
	ro.Authentication.RemoteKubeConfigFile = kubeconfig
	ro.Authorization.RemoteKubeConfigFile = kubeconfig
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ExtraConfig.Clock = clock.RealClock{}
	cfg.ExtraConfig.StaleAfter = time.Hour
	if r.srv, err = cfg.Complete().New(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.srv.GenericAPIServer.PrepareRun().RunWithContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("replica did not stop")
		}
	})
	return r
}

// view is the stated scale: 5 peers of about 5,000 GVRs each, mostly
// identical, with rolling-upgrade skew.
func view(t *testing.T) compute.Output {
	t.Helper()
	var peers []compute.Peer
	now := time.Now()
	for _, s := range discoverydocs.Servers(11, 5, 100, 5000) {
		peers = append(peers, compute.Peer{ServerID: s.ID, Endpoint: s.ID + ":6443", BinaryVersion: "v1.37.2", Ready: true,
			ReadyReason: "DiscoverySynced", ReadyTransition: now, LastSyncTime: now, HasDocument: true,
			Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease}, APIs: s.Groups})
	}
	out, err := compute.Compute(compute.Input{Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pointServiceAt makes the APIService's Service resolve to r only.
func pointServiceAt(t *testing.T, r *replica) {
	t.Helper()
	ctx := context.Background()
	cs := planetest.Kube(t, cluster.AdminConfig(0))
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: localcluster.ExtensionEndpointSlice, Namespace: localcluster.ExtensionNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: localcluster.ExtensionService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(r.port), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{hostIP()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	slices := cs.DiscoveryV1().EndpointSlices(localcluster.ExtensionNamespace)
	old, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	if err == nil {
		slice.ResourceVersion = old.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	} else {
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// register creates the Namespace, Service and APIService of the group,
// the Service pointing at r.
func register(t *testing.T, r *replica, caBundle []byte) {
	t.Helper()
	ctx := context.Background()
	cs := planetest.Kube(t, cluster.AdminConfig(0))
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: localcluster.ExtensionNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: localcluster.ExtensionService, Namespace: localcluster.ExtensionNamespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := cs.CoreV1().Services(localcluster.ExtensionNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pointServiceAt(t, r)
	agg, err := aggregatorclient.NewForConfig(cluster.AdminConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	as := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: localcluster.APIServiceName},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: v1alpha1.GroupName, Version: v1alpha1.SchemeGroupVersion.Version, GroupPriorityMinimum: 1000, VersionPriority: 100,
			Service:  &apiregistrationv1.ServiceReference{Namespace: localcluster.ExtensionNamespace, Name: localcluster.ExtensionService, Port: ptr.To[int32](443)},
			CABundle: caBundle,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, as, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// metric sums the samples of name on the kube-apiserver's /metrics.
func metric(t *testing.T, name string) float64 {
	t.Helper()
	code, _, body := planetest.Get(t, cluster.AdminConfig(0), "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	var v float64
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		f, _ := strconv.ParseFloat(m[2], 64)
		v += f
	}
	return v
}

// selfCPU is this process's CPU time (user + system).
func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// listBytes is the JSON size of a full list of resource from r.
func listBytes(t *testing.T, resource string) int {
	t.Helper()
	code, _, body := planetest.Get(t, cluster.AdminConfig(0), "/apis/peerdiscovery.k8s.io/v1alpha1/"+resource)
	if code != http.StatusOK {
		t.Fatalf("list %s: %d %.500s", resource, code, body)
	}
	return len(body)
}

type result struct {
	bytes     int64
	took      time.Duration
	kubeCPU   float64 // seconds, above idle
	serverCPU float64 // seconds, above idle
}

func TestRelistCost(t *testing.T) {
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_SCALE_E2E=1")
	}
	v := view(t)
	certDir := t.TempDir()
	reps := make([]*replica, relists+1)
	for i := range reps {
		reps[i] = startReplica(t, certDir)
		if err := reps[i].srv.Publisher.Publish(v); err != nil {
			t.Fatal(err)
		}
	}
	caBundle, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	register(t, reps[0], caBundle)
	planetest.WaitFor(t, 3*time.Minute, "the filter's routing caches synced from replica 0", func() error {
		if !planetest.FilterSynced(t, cluster, 0) {
			return fmt.Errorf("peerdiscovery_filter_cache_synced is not 1")
		}
		return nil
	})
	sizes := map[string]int{}
	for _, res := range []string{"peerroutingtables", "apiserverpeers", "peeraggregateddiscoveries"} {
		sizes[res] = listBytes(t, res)
	}
	t.Logf("relist: %d routing tables, %d peers; JSON lists: peerroutingtables %.1f MB, apiserverpeers %.1f kB, peeraggregateddiscoveries %.1f MB",
		len(v.Routes), len(v.Peers), float64(sizes["peerroutingtables"])/1e6, float64(sizes["apiserverpeers"])/1e3, float64(sizes["peeraggregateddiscoveries"])/1e6)

	var results []result
	for i := 1; i <= relists; i++ {
		from, to := reps[i-1], reps[i]
		pointServiceAt(t, to)
		time.Sleep(3 * time.Second) // the aggregator's EndpointSlice informer

		// Idle rates over the same span as a relist is measured.
		const idleSpan = 10 * time.Second
		k0, s0 := metric(t, "process_cpu_seconds_total"), selfCPU(t)
		time.Sleep(idleSpan)
		kubeIdle := (metric(t, "process_cpu_seconds_total") - k0) / idleSpan.Seconds()
		serverIdle := (selfCPU(t) - s0).Seconds() / idleSpan.Seconds()

		relists0 := metric(t, "peerdiscovery_filter_relists_total")
		bytes0 := to.written.Load()
		k0, s0 = metric(t, "process_cpu_seconds_total"), selfCPU(t)
		start := time.Now()
		from.srv.Stores.Stop() // ends the filter's watches on the old replica

		// Done when all three caches relisted and the new replica has
		// sent nothing for 3 s.
		last, lastChange := to.written.Load(), time.Now()
		planetest.WaitFor(t, 2*time.Minute, "the filter's three caches relisted from the next replica", func() error {
			if n := to.written.Load(); n != last {
				last, lastChange = n, time.Now()
			}
			if r := metric(t, "peerdiscovery_filter_relists_total") - relists0; r < 3 {
				return fmt.Errorf("%v relists so far", r)
			}
			if time.Since(lastChange) < 3*time.Second {
				return fmt.Errorf("the replica is still sending")
			}
			return nil
		})
		span := time.Since(start).Seconds()
		r := result{
			bytes:     last - bytes0,
			took:      lastChange.Sub(start),
			kubeCPU:   metric(t, "process_cpu_seconds_total") - k0 - kubeIdle*span,
			serverCPU: (selfCPU(t) - s0).Seconds() - serverIdle*span,
		}
		if !planetest.FilterSynced(t, cluster, 0) {
			t.Fatal("the filter is not synced after the relist")
		}
		t.Logf("relist %d: %.1f MB sent by the new replica, last byte %v after the old one ended its watches; CPU above idle: kube-apiserver %.2f s (idle %.3f/s), replica %.2f s (idle %.3f/s)",
			i, float64(r.bytes)/1e6, r.took.Round(10*time.Millisecond), r.kubeCPU, kubeIdle, r.serverCPU, serverIdle)
		results = append(results, r)
	}
	med := func(f func(result) float64) float64 {
		vals := make([]float64, len(results))
		for i, r := range results {
			vals[i] = f(r)
		}
		slices.Sort(vals)
		return vals[len(vals)/2]
	}
	t.Logf("relist median of %d: %.1f MB, %.2f s to the last byte, kube-apiserver %.2f CPU-s, replica %.2f CPU-s",
		len(results), med(func(r result) float64 { return float64(r.bytes) / 1e6 }), med(func(r result) float64 { return r.took.Seconds() }),
		med(func(r result) float64 { return r.kubeCPU }), med(func(r result) float64 { return r.serverCPU }))
}
