// Package e2e135 runs an upgrade from v1.35 on a real local control plane
// (internal/localcluster): kube-apiserver v1.35.4, v1.36.3 and v1.37.2, each
// with the filter linked in (the v1.35 build compiles it against the v0.35
// libraries), and two peerdiscovery-apiserver replicas behind the
// APIService. Upstream's built-in proxy is alpha and off in v1.35; this is
// what makes the v1.36 APIs work through a v1.35 server.
package e2e135

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/test/discoverycheck"
	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/clustertest"
)

// The servers, by index.
const (
	v135 = 0
	v136 = 1
	v137 = 2
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv("PEERDISCOVERY_E2E") != "1" {
		fmt.Println("end-to-end tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)")
		os.Exit(m.Run())
	}
	clustertest.RunTests(m, 20*time.Minute, localcluster.Config{
		Servers: []localcluster.ServerSpec{
			// apps/v1 and policy/v1 off: Deployments, DaemonSets,
			// PodDisruptionBudgets... reach this server's clients from peers,
			// through every discovery form (LegacyDiscoveryAndOpenAPI).
			{Version: "v1.35.4", ExtraFlags: []string{"--runtime-config=apps/v1=false,policy/v1=false"}},
			{Version: "v1.36.3"},
			{Version: "v1.37.2"},
		},
		// The skew under test is in the servers; a controller manager
		// would need a third build (v1.35.4) for nothing here.
		ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
		TombstonePeriod:   time.Minute,
		SubnetOctet:       82,
	}, func(c *localcluster.Cluster) { cluster = c })
}

// map136 is MutatingAdmissionPolicy: admissionregistration.k8s.io/v1 serves
// it from v1.36 on (measured: the only GVRs v1.36.3 serves and v1.35.4 does
// not are this resource and its bindings).
var map136 = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}

const mapPath = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"

// inertPolicy has no binding, so it mutates nothing.
func inertPolicy(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
		"metadata": map[string]interface{}{"name": name},
		"spec": map[string]interface{}{
			"matchConstraints": map[string]interface{}{"resourceRules": []interface{}{map[string]interface{}{
				"apiGroups": []interface{}{""}, "apiVersions": []interface{}{"v1"}, "operations": []interface{}{"CREATE"}, "resources": []interface{}{"configmaps"},
			}}},
			"failurePolicy": "Ignore", "reinvocationPolicy": "Never",
			"mutations": []interface{}{map[string]interface{}{
				"patchType":          "ApplyConfiguration",
				"applyConfiguration": map[string]interface{}{"expression": `Object{metadata: Object.metadata{labels: {"pd-e2e": "mutated"}}}`},
			}},
		},
	}}
}

func needCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %v", what, err)
}

func raw(t *testing.T, cfg *rest.Config, path string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	return discoverycheck.Get(t, cfg, path, headers...)
}

func pd(t *testing.T, i int) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cluster.AdminConfig(i))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serverIDs maps server index → ready peer identity.
func serverIDs(t *testing.T) map[int]string {
	t.Helper()
	out := map[int]string{}
	waitFor(t, 2*time.Minute, "every kube-apiserver a ready peer", func() error {
		peers, err := pd(t, v137).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i, s := range cluster.Servers() {
			for _, p := range peers.Items {
				host, _, _ := net.SplitHostPort(p.Spec.Endpoint)
				for _, c := range p.Status.Conditions {
					if host == s.IP && c.Type == v1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
						out[i] = p.Spec.ServerID
					}
				}
			}
		}
		if len(out) != len(cluster.Servers()) {
			return fmt.Errorf("ready peers by server: %v", out)
		}
		return nil
	})
	return out
}

func review(t *testing.T, i int, verb, path, source string) v1alpha1.RouteReviewStatus {
	t.Helper()
	r, err := pd(t, i).PeerdiscoveryV1alpha1().RouteReviews().Create(context.Background(), &v1alpha1.RouteReview{
		Spec: v1alpha1.RouteReviewSpec{Verb: verb, Path: path, SourcePeer: source},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("RouteReview %s %s from %s: %v", verb, path, source, err)
	}
	return r.Status
}

const acceptV2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// TestUpgradeFromV135 runs the steps in order on one control plane.
func TestUpgradeFromV135(t *testing.T) {
	needCluster(t)
	ids := serverIDs(t)
	t.Logf("server identities: %v", ids)
	for _, s := range []struct {
		name string
		fn   func(*testing.T, map[int]string)
	}{
		{"MergedDiscoveryIdentical", testMergedDiscovery},
		{"CRUDAndWatchThroughV135", testCRUDAndWatch},
		{"LegacyDiscoveryAndOpenAPI", testLegacyDiscoveryAndOpenAPI},
		{"CapableServersStopped", testCapableStopped},
	} {
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, ids) }) {
			t.Fatalf("%s failed; later steps depend on the cluster state", s.name)
		}
	}
}

// testLegacyDiscoveryAndOpenAPI: through v1.35.4, which has apps/v1 and
// policy/v1 turned off and lacks the v1.36 admission policies, the legacy
// discovery endpoints and OpenAPI v3 show the whole cluster, and a
// client-go client that discovers the legacy way lists Deployments.
func testLegacyDiscoveryAndOpenAPI(t *testing.T, _ map[int]string) {
	res := discoverycheck.LegacyAndOpenAPI(t, cluster, v135)
	t.Logf("through v1.35.4: %d group-versions, %d answered by peers (%d with no single capable server), %d OpenAPI documents from peers",
		res.GroupVersions, res.FromPeers, res.Split, res.OpenAPIFromPeers)
	if res.FromPeers < 3 || res.OpenAPIFromPeers < 2 {
		t.Fatalf("apps/v1, policy/v1 and admissionregistration.k8s.io/v1 must come from peers: %+v", res)
	}
	for _, path := range []string{"/apis/apps/v1", "/apis/policy/v1"} {
		if code, _, body := raw(t, cluster.AdminConfig(v135), path, "X-Kubernetes-Peer-Proxied", "true"); code != http.StatusNotFound {
			t.Fatalf("v1.35.4 serves %s itself (%d %.100s): the runtime-config this test needs is gone", path, code, body)
		}
	}
	out, err := cluster.Kubectl("--context", cluster.Servers()[v135].Context, "explain", "deployments.spec.replicas")
	if err != nil || !strings.Contains(out, "replicas") {
		t.Fatalf("kubectl explain deployments through v1.35.4: %v\n%s", err, out)
	}
}

// Every server, v1.35.4 included, answers /apis with the same merged
// document (same ETag), and it lists the v1.36 resource.
func testMergedDiscovery(t *testing.T, _ map[int]string) {
	waitFor(t, time.Minute, "the same /apis and ETag from every server", func() error {
		code0, h0, body0 := raw(t, cluster.AdminConfig(v135), "/apis", "Accept", acceptV2)
		if code0 != http.StatusOK || h0.Get("ETag") == "" {
			return fmt.Errorf("v1.35.4 /apis: %d, ETag %q", code0, h0.Get("ETag"))
		}
		for i := range cluster.Servers() {
			code, h, body := raw(t, cluster.AdminConfig(i), "/apis", "Accept", acceptV2)
			if code != http.StatusOK || h.Get("ETag") != h0.Get("ETag") || !bytes.Equal(body, body0) {
				return fmt.Errorf("server %d: %d, ETag %q vs %q", i, code, h.Get("ETag"), h0.Get("ETag"))
			}
		}
		if !listsGVR(body0, map136) {
			return fmt.Errorf("merged /apis lacks %s", map136)
		}
		return nil
	})
	// Its own view (profile=nopeer) lacks it: the skew is real.
	if _, _, local := raw(t, cluster.AdminConfig(v135), "/apis", "Accept", acceptV2+";profile=nopeer"); listsGVR(local, map136) {
		t.Fatalf("v1.35.4 serves %s itself; the skew this test needs is gone", map136)
	}
}

// listsGVR reports whether an aggregated discovery document lists gvr.
func listsGVR(body []byte, gvr schema.GroupVersionResource) bool {
	var doc struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Versions []struct {
				Version   string `json:"version"`
				Resources []struct {
					Resource string `json:"resource"`
				} `json:"resources"`
			} `json:"versions"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return false
	}
	for _, g := range doc.Items {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				if g.Metadata.Name == gvr.Group && v.Version == gvr.Version && r.Resource == gvr.Resource {
					return true
				}
			}
		}
	}
	return false
}

// Create, get, list, update, watch and delete a v1.36-only resource through
// v1.35.4; RouteReview says why.
func testCRUDAndWatch(t *testing.T, ids map[int]string) {
	ctx := context.Background()
	dc, err := dynamic.NewForConfig(cluster.AdminConfig(v135))
	if err != nil {
		t.Fatal(err)
	}
	res := dc.Resource(map136)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list through v1.35.4: %v", err)
	}
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch through v1.35.4: %v", err)
	}
	defer w.Stop()
	created, err := res.Create(ctx, inertPolicy("pd-e2e135"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create through v1.35.4: %v", err)
	}
	got, err := res.Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil || got.GetUID() != created.GetUID() {
		t.Fatalf("get through v1.35.4: %v", err)
	}
	got.SetLabels(map[string]string{"pd-e2e": "updated"})
	if _, err := res.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update through v1.35.4: %v", err)
	}
	if err := res.Delete(ctx, created.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete through v1.35.4: %v", err)
	}
	want := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}
	for i, typ := range want {
		select {
		case e, ok := <-w.ResultChan():
			if !ok || e.Type != typ {
				t.Fatalf("watch event %d through v1.35.4: %v %v, want %s", i, ok, e.Type, typ)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no %s event through v1.35.4", typ)
		}
	}
	r := review(t, v135, "get", mapPath, ids[v135])
	if r.Decision != v1alpha1.RouteProxy || len(r.Candidates) != 2 {
		t.Fatalf("RouteReview of %s from v1.35.4: %+v, want Proxy to v1.36.3 and v1.37.2", mapPath, r)
	}
}

// Both capable servers stop gracefully: v1.35.4 answers 503 with
// Retry-After, never 404, and RouteReview agrees; then they come back.
func testCapableStopped(t *testing.T, ids map[int]string) {
	for _, i := range []int{v136, v137} {
		if err := cluster.StopAPIServer(i, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	saw := map[int]int{}
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		code, h, body := raw(t, cluster.AdminConfig(v135), mapPath)
		saw[code]++
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Fatalf("GET %s through v1.35.4 with its capable servers stopped: %d %s, want 503 with Retry-After", mapPath, code, body)
		}
	}
	t.Logf("GET %s through v1.35.4 while v1.36.3 and v1.37.2 were stopped: %v", mapPath, saw)
	if r := review(t, v135, "get", mapPath, ids[v135]); r.Decision != v1alpha1.RouteUnavailable {
		t.Fatalf("RouteReview with the capable servers stopped: %+v", r)
	}
	for _, i := range []int{v136, v137} {
		if err := cluster.StartAPIServer(i); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "the v1.36 resource served through v1.35.4 again", func() error {
		if code, _, body := raw(t, cluster.AdminConfig(v135), mapPath); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}
