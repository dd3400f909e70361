package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// svm is a real skew: storagemigration.k8s.io/v1 is served by v1.37.2 and
// not by v1.36.3.
var svm = schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}

const svmPath = "/apis/storagemigration.k8s.io/v1/storageversionmigrations"

func newSVM(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
		"metadata": map[string]interface{}{"name": name},
		"spec":     map[string]interface{}{"resource": map[string]interface{}{"group": "", "resource": "configmaps"}},
	}}
}

// TestControlPlane runs the scenarios in order on one control plane; later
// ones stop and restart servers.
func TestControlPlane(t *testing.T) {
	needCluster(t)
	ids := serverIDs(t)
	t.Logf("server identities: %v", ids)
	steps := []struct {
		name string
		fn   func(*testing.T, map[int]string)
	}{
		{"MergedDiscovery", testMergedDiscovery},
		{"VersionSkewCRUD", testVersionSkewCRUD},
		{"RuntimeConfigAttribution", testRuntimeConfigAttribution},
		{"KubectlColumnsAndSelectors", testKubectl},
		{"RouteReview", testRouteReview},
		{"LegacyDiscoveryAndOpenAPI", testLegacyDiscoveryAndOpenAPI},
		{"Security", testSecurity},
		{"ProxyHopIdentity", testProxyHopIdentity},
		{"CRDServedLocallyAndNotResurrected", testCRD},
		{"WatchPeerLeaveAndReturn", testWatchPeerLeaveAndReturn},
		{"LoadWhileCapableServerKilled", testLoadWhileKilled},
		{"PostAtMostOnceWhileKilled", testPostAtMostOnceWhileKilled},
		{"FrozenCapableServer", testFrozenCapableServer},
		{"OnlyCapableServersStopped", testOnlyCapableStopped},
		{"ExtensionServersStopped", testExtensionStopped},
		{"ReplicasAgree", testReplicasAgree},
		{"ReplicaRestartsNoRelist", testReplicaRestartsNoRelist},
		{"TombstonesSurviveReplicaRestarts", testTombstonesSurviveReplicaRestarts},
		{"NewIdentitySameEndpoint", testNewIdentitySameEndpoint},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, ids) }) {
			t.Fatalf("%s failed; later steps depend on the cluster state", s.name)
		}
	}
}

func testMergedDiscovery(t *testing.T, _ map[int]string) {
	// Every kube-apiserver carries the filter: its post-start hook and
	// readyz check are there, and its caches are synced.
	for i := range cluster.Servers() {
		code, _, body := raw(t, cluster.AdminConfig(i), http.MethodGet, "/readyz?verbose", nil)
		if code != http.StatusOK || !strings.Contains(string(body), "[+]peerdiscovery-filter ok") ||
			!strings.Contains(string(body), "[+]poststarthook/peerdiscovery-filter ok") {
			t.Fatalf("server %d readyz: %d\n%s", i, code, body)
		}
		waitFor(t, time.Minute, "filter caches synced", func() error {
			if _, _, m := raw(t, cluster.AdminConfig(i), http.MethodGet, "/metrics", nil); !strings.Contains(string(m), "peerdiscovery_filter_cache_synced 1") {
				return fmt.Errorf("server %d not synced", i)
			}
			return nil
		})
	}
	union := map[schema.GroupVersionResource]bool{}
	for i := range cluster.Servers() {
		groups, _, _ := discovery(t, i, "/apis", true)
		for gvr := range gvrSet(groups) {
			union[gvr] = true
		}
	}
	waitFor(t, time.Minute, "merged discovery equals the union of every server's nopeer view", func() error {
		out, err := cluster.Kubectl("get", "--raw", "/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries/cluster")
		if err != nil {
			return err
		}
		var pad v1alpha1.PeerAggregatedDiscovery
		if err := json.Unmarshal([]byte(out), &pad); err != nil {
			return err
		}
		got := gvrSet(pad.Status.APIs.Items)
		if fmt.Sprint(sortedGVRs(got)) != fmt.Sprint(sortedGVRs(union)) {
			return fmt.Errorf("merged has %d GVRs, union %d", len(got), len(union))
		}
		return nil
	})
	waitFor(t, time.Minute, "every server answers /apis with the same document and ETag", func() error {
		_, etag0, body0 := discovery(t, 0, "/apis", false)
		if etag0 == "" {
			return fmt.Errorf("server 0: no ETag")
		}
		for i := 1; i < len(cluster.Servers()); i++ {
			_, etag, body := discovery(t, i, "/apis", false)
			if etag != etag0 || !bytes.Equal(body, body0) {
				return fmt.Errorf("server %d: ETag %s vs %s, same body %v", i, etag, etag0, bytes.Equal(body, body0))
			}
		}
		// And a 304 for the current ETag.
		code, _, _ := raw(t, cluster.AdminConfig(0), http.MethodGet, "/apis", nil, "Accept", acceptV2, "If-None-Match", etag0)
		if code != http.StatusNotModified {
			return fmt.Errorf("If-None-Match: %d, want 304", code)
		}
		return nil
	})
	groups, _, _ := discovery(t, old, "/apis", false)
	if !gvrSet(groups)[svm] {
		t.Fatalf("the v1.36.3 server's /apis does not list %s", svm)
	}
}

func testVersionSkewCRUD(t *testing.T, _ map[int]string) {
	oldDoc, _, _ := discovery(t, old, "/apis", true)
	newDoc, _, _ := discovery(t, new1, "/apis", true)
	oldSet := gvrSet(oldDoc)
	skew := map[schema.GroupVersionResource]bool{}
	for gvr := range gvrSet(newDoc) {
		if !oldSet[gvr] {
			skew[gvr] = true
		}
	}
	t.Logf("GVRs served by v1.37.2 and not by v1.36.3 (%d): %v", len(skew), sortedGVRs(skew))
	if !skew[svm] {
		t.Fatalf("%s is not in the skew", svm)
	}
	ctx := context.Background()
	viaOld := dyn(t, cluster.AdminConfig(old)).Resource(svm)
	viaNew := dyn(t, cluster.AdminConfig(new1)).Resource(svm)
	before := rerouted(t, old, svm.Group, svm.Resource)

	w, err := viaOld.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=e2e-skew"})
	if err != nil {
		t.Fatalf("watch through v1.36.3: %v", err)
	}
	defer w.Stop()
	created, err := viaOld.Create(ctx, newSVM("e2e-skew"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create through v1.36.3: %v", err)
	}
	expectEvent(t, w, watch.Added, "e2e-skew")

	// Responses through the old server are the peer's own bytes.
	path := svmPath + "/e2e-skew"
	c1, _, b1 := raw(t, cluster.AdminConfig(old), http.MethodGet, path, nil, "Accept", "application/json")
	c2, _, b2 := raw(t, cluster.AdminConfig(new1), http.MethodGet, path, nil, "Accept", "application/json")
	if c1 != http.StatusOK || c2 != http.StatusOK || !bytes.Equal(b1, b2) {
		t.Fatalf("GET via v1.36.3 (%d) differs from direct (%d):\n%s\n%s", c1, c2, b1, b2)
	}
	list, err := viaOld.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("list through v1.36.3: %v (%d items)", err, len(list.Items))
	}
	created.SetLabels(map[string]string{"e2e": "updated"})
	if _, err := viaOld.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update through v1.36.3: %v", err)
	}
	expectEvent(t, w, watch.Modified, "e2e-skew")
	got, err := viaNew.Get(ctx, "e2e-skew", metav1.GetOptions{})
	if err != nil || got.GetLabels()["e2e"] != "updated" {
		t.Fatalf("update not visible directly: %v %v", err, got)
	}
	if err := viaOld.Delete(ctx, "e2e-skew", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete through v1.36.3: %v", err)
	}
	expectEvent(t, w, watch.Deleted, "e2e-skew")
	if after := rerouted(t, old, svm.Group, svm.Resource); after <= before {
		t.Fatalf("apiserver_rerouted_request_total did not grow on v1.36.3: %v -> %v", before, after)
	}
}

func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed before %s %s", typ, name)
			}
			if ev.Type == typ {
				if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetName() == name {
					return
				}
			}
		case <-deadline:
			t.Fatalf("no %s event for %s", typ, name)
		}
	}
}

// testRuntimeConfigAttribution: certificates.k8s.io/v1 is off on v1.36.3.
// A CSR created through it by alice is proxied with her identity: the
// peer records spec.username = alice.
func testRuntimeConfigAttribution(t *testing.T, _ map[int]string) {
	ctx := context.Background()
	admin := kube(t, cluster.AdminConfig(new1))
	grant(t, admin, "e2e-csr-creator", "alice", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
		Verbs: []string{"create", "get", "list", "watch", "delete"},
	})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "e2e"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-attribution"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: "example.com/e2e",
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature},
		},
	}
	alice := kube(t, cluster.UserConfig(old, "alice", nil))
	var created *certificatesv1.CertificateSigningRequest
	waitFor(t, 30*time.Second, "alice's RBAC", func() error {
		created, err = alice.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		return err
	})
	defer admin.CertificatesV1().CertificateSigningRequests().Delete(ctx, csr.Name, metav1.DeleteOptions{})
	if created.Spec.Username != "alice" {
		t.Fatalf("CSR attributed to %q, want alice", created.Spec.Username)
	}
	path := "/apis/certificates.k8s.io/v1/certificatesigningrequests/" + csr.Name
	c1, _, b1 := raw(t, cluster.AdminConfig(old), http.MethodGet, path, nil, "Accept", "application/json")
	c2, _, b2 := raw(t, cluster.AdminConfig(new2), http.MethodGet, path, nil, "Accept", "application/json")
	if c1 != http.StatusOK || !bytes.Equal(b1, b2) {
		t.Fatalf("CSR via v1.36.3 (%d) differs from direct (%d)", c1, c2)
	}
}

func grant(t *testing.T, admin kubernetesInterface, name, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func testKubectl(t *testing.T, _ map[int]string) {
	ctxOld := cluster.Servers()[old].Context
	out, err := cluster.Kubectl("--context", ctxOld, "get", "peerroutingtables")
	if err != nil {
		t.Fatal(err)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME GROUP VERSION RESOURCE READY SERVED-BY-ALL CLUSTER-WIDE AGE" {
		t.Fatalf("peerroutingtables columns: %v", header)
	}
	out, err = cluster.Kubectl("--context", ctxOld, "get", "apiserverpeers")
	if err != nil {
		t.Fatal(err)
	}
	header = strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME ENDPOINT VERSION READY GVRS LAST-SYNC AGE" {
		t.Fatalf("apiserverpeers columns: %v", header)
	}
	if out, err = cluster.Kubectl("--context", ctxOld, "get", "peerdiscovery"); err != nil || !strings.Contains(out, "peerroutingtable.peerdiscovery.k8s.io/") {
		t.Fatalf("kubectl get peerdiscovery (category): %v\n%.500s", err, out)
	}
	if out, err = cluster.Kubectl("--context", ctxOld, "explain", "peerroutingtables.status.servedByAll"); err != nil || !strings.Contains(out, "servedByAll") {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}

	// The field selector lists exactly the GVRs not served by every peer.
	var sets []map[schema.GroupVersionResource]bool
	for i := range cluster.Servers() {
		api, _, _ := discovery(t, i, "/api", true)
		apis, _, _ := discovery(t, i, "/apis", true)
		s := gvrSet(apis)
		for gvr := range gvrSet(api) {
			s[gvr] = true
		}
		sets = append(sets, s)
	}
	want := map[string]bool{}
	for gvr := range sets[0] {
		for _, s := range sets[1:] {
			if !s[gvr] {
				want[routeName(gvr)] = true
			}
		}
	}
	for _, s := range sets[1:] {
		for gvr := range s {
			if !sets[0][gvr] {
				want[routeName(gvr)] = true
			}
		}
	}
	waitFor(t, time.Minute, "servedByAll=false lists exactly the skew", func() error {
		out, err := cluster.Kubectl("--context", ctxOld, "get", "peerroutingtables", "--field-selector", "status.servedByAll=false", "-o", "name")
		if err != nil {
			return err
		}
		got := map[string]bool{}
		for _, l := range strings.Fields(out) {
			got[strings.TrimPrefix(l, "peerroutingtable.peerdiscovery.k8s.io/")] = true
		}
		if fmt.Sprint(keys(got)) != fmt.Sprint(keys(want)) {
			return fmt.Errorf("got %v, want %v", keys(got), keys(want))
		}
		return nil
	})
}

func testRouteReview(t *testing.T, ids map[int]string) {
	r := review(t, new1, "get", svmPath, ids[old])
	if r.Decision != v1alpha1.RouteProxy || (r.Target != ids[new1] && r.Target != ids[new2]) {
		t.Fatalf("svm from v1.36.3: %+v", r)
	}
	if r := review(t, new1, "list", svmPath, ids[new1]); r.Decision != v1alpha1.RouteLocal {
		t.Fatalf("svm from v1.37.2: %+v", r)
	}
	if r := review(t, old, "create", "/apis/certificates.k8s.io/v1/certificatesigningrequests", ids[old]); r.Decision != v1alpha1.RouteProxy {
		t.Fatalf("csr from v1.36.3: %+v", r)
	}
	if r := review(t, old, "get", "/api/v1/namespaces/default/pods", ids[old]); r.Decision != v1alpha1.RouteLocal {
		t.Fatalf("pods: %+v", r)
	}
	if r := review(t, old, "get", "/apis/nothing.example.com/v1/things", ids[old]); r.Decision != v1alpha1.RouteNotFound {
		t.Fatalf("unknown: %+v", r)
	}
	if r := review(t, old, "get", "/healthz", ids[old]); r.Decision != v1alpha1.RouteLocal {
		t.Fatalf("non-resource: %+v", r)
	}
	// What really happened matches: the proxied request succeeded, the
	// unknown one is a 404 from the local chain.
	if code, _, body := raw(t, cluster.AdminConfig(old), http.MethodGet, svmPath, nil); code != http.StatusOK {
		t.Fatalf("svm via v1.36.3: %d %s", code, body)
	}
	if code, _, _ := raw(t, cluster.AdminConfig(old), http.MethodGet, "/apis/nothing.example.com/v1/things", nil); code != http.StatusNotFound {
		t.Fatalf("unknown via v1.36.3: %d, want 404", code)
	}
}

func testSecurity(t *testing.T, _ map[int]string) {
	ctx := context.Background()
	for i := range cluster.Servers() {
		_, err := pdFor(t, cluster.UserConfig(i, "nobody", nil)).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("server %d: user without the reader role: %v, want 403", i, err)
		}
	}
	bob := cluster.UserConfig(old, "bob", nil)
	for _, h := range [][]string{
		nil,
		{"X-Remote-User", "system:admin", "X-Remote-Group", "system:masters"},
		{"X-Kubernetes-Peer-Proxied", "true"},
		{"X-Remote-User", "system:admin", "X-Remote-Group", "system:masters", "X-Kubernetes-Peer-Proxied", "true"},
	} {
		code, _, body := raw(t, bob, http.MethodGet, svmPath, nil, h...)
		if code != http.StatusForbidden {
			t.Fatalf("bob with headers %v: %d %s, want 403", h, code, body)
		}
	}
	// Writes too: client identity headers never reach the peer.
	code, _, body := raw(t, bob, http.MethodPost, svmPath, strings.NewReader(`{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"e2e-bob"},"spec":{"resource":{"group":"","resource":"configmaps"}}}`),
		"Content-Type", "application/json", "X-Remote-User", "system:admin", "X-Remote-Group", "system:masters")
	if code != http.StatusForbidden {
		t.Fatalf("bob POST with forged identity headers: %d %s, want 403", code, body)
	}
}

func testCRD(t *testing.T, ids map[int]string) {
	ctx := context.Background()
	ext, err := apiextensionsclient.NewForConfig(cluster.AdminConfig(new1))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.e2e.peerdiscovery.test"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "e2e.peerdiscovery.test", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTrue()}}}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "e2e.peerdiscovery.test", Version: "v1", Resource: "widgets"}
	path := "/apis/e2e.peerdiscovery.test/v1/namespaces/default/widgets"
	before := rerouted(t, old, gvr.Group, gvr.Resource)
	widget := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "e2e.peerdiscovery.test/v1", "kind": "Widget", "metadata": map[string]interface{}{"name": "w1"}}}
	waitFor(t, time.Minute, "the CRD served through every server", func() error {
		for i := range cluster.Servers() {
			if _, err := dyn(t, cluster.AdminConfig(i)).Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
				return fmt.Errorf("server %d: %v", i, err)
			}
		}
		return nil
	})
	if _, err := dyn(t, cluster.AdminConfig(old)).Resource(gvr).Namespace("default").Create(ctx, widget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "RouteReview: the CRD is local everywhere", func() error {
		if r := review(t, new1, "get", path, ids[old]); r.Decision != v1alpha1.RouteLocal {
			return fmt.Errorf("%+v", r)
		}
		return nil
	})
	if after := rerouted(t, old, gvr.Group, gvr.Resource); after != before {
		t.Fatalf("a CRD request was proxied: %v -> %v", before, after)
	}

	if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	inMerged := func() bool {
		pad, err := pd(t, new1).PeerdiscoveryV1alpha1().PeerAggregatedDiscoveries().Get(ctx, v1alpha1.PeerAggregatedDiscoveryName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return gvrSet(pad.Status.APIs.Items)[gvr]
	}
	waitFor(t, time.Minute, "the deleted CRD leaves merged discovery", func() error {
		if inMerged() {
			return fmt.Errorf("still there")
		}
		return nil
	})
	// It never comes back: watch several refresh intervals.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if inMerged() {
			t.Fatal("the deleted CRD's GVR came back in merged discovery")
		}
	}
}

func testWatchPeerLeaveAndReturn(t *testing.T, _ map[int]string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	// kubectl get -w ends when the server ends the watch (as any watch may
	// be ended); like an informer, start it again.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, cluster.KubectlBinary(), "--kubeconfig", cluster.Kubeconfig(), "--cache-dir", cluster.KubectlCacheDir(),
				"--context", cluster.Servers()[new1].Context, "get", "apiserverpeers", "-w")
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run()
			if ctx.Err() == nil {
				fmt.Fprintf(&out, "(kubectl get -w ended; restarting)\n")
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	defer func() { cancel(); <-done }()
	ip := cluster.Servers()[new2].IP
	rowWith := func(ready string) func() error {
		return func() error {
			for _, l := range strings.Split(out.String(), "\n") {
				f := strings.Fields(l)
				if len(f) > 3 && strings.HasPrefix(f[1], ip+":") && f[3] == ready {
					return nil
				}
			}
			return fmt.Errorf("no %s row for %s yet:\n%s", ready, ip, out.String())
		}
	}
	waitFor(t, 30*time.Second, "initial row", rowWith("True"))
	if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "kubectl get -w shows the peer leave", rowWith("False"))
	n := len(out.String())
	if err := cluster.StartAPIServer(new2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "kubectl get -w shows the peer back", func() error {
		tail := out.String()[n:]
		for _, l := range strings.Split(tail, "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && strings.HasPrefix(f[1], ip+":") && f[3] == "True" {
				return nil
			}
		}
		return fmt.Errorf("not back yet")
	})
}

// testLoadWhileKilled: a bounded load through the non-capable server loses
// no request while one of two capable servers is killed.
func testLoadWhileKilled(t *testing.T, ids map[int]string) {
	waitReadyPeer(t, ids[new2])
	const total, workers = 400, 4
	var done, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	cfg := cluster.AdminConfig(old)
	var wg sync.WaitGroup
	jobs := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				code, _, body := raw(t, cfg, http.MethodGet, svmPath, nil)
				done.Add(1)
				if code != http.StatusOK {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%d %.200s", code, body))
					mu.Unlock()
				}
			}
		}()
	}
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; i < total && time.Now().Before(deadline); i++ {
		if i == total/4 {
			if err := cluster.StopAPIServer(new2, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("load through v1.36.3 while a capable v1.37.2 was killed: %d requests, %d failed", done.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Fatalf("lost %d requests: %v", failed.Load(), failures)
	}
	if err := cluster.StartAPIServer(new2); err != nil {
		t.Fatal(err)
	}
	waitReadyPeer(t, ids[new2])
}

func waitReadyPeer(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "peer "+id+" ready", func() error {
		peers, err := pd(t, new1).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range peers.Items {
			if p.Spec.ServerID == id && ready(&p) {
				return nil
			}
		}
		return fmt.Errorf("not ready")
	})
}

// testOnlyCapableStopped: with every server that serves the GVR stopped,
// the old server answers 503 with Retry-After — never 404 — for the whole
// observation, which spans the registration Leases lapsing.
func testOnlyCapableStopped(t *testing.T, ids map[int]string) {
	if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StopAPIServer(new1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.AdminConfig(old)
	saw503 := 0
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		code, h, body := raw(t, cfg, http.MethodGet, svmPath, nil)
		switch code {
		case http.StatusNotFound:
			t.Fatalf("404 for a GVR whose servers are down: %s", body)
		case http.StatusServiceUnavailable:
			saw503++
			if h.Get("Retry-After") == "" {
				t.Fatalf("503 without Retry-After: %s", body)
			}
			var status metav1.Status
			if err := json.Unmarshal(body, &status); err != nil || status.Reason != metav1.StatusReasonServiceUnavailable {
				t.Fatalf("503 body is not a Status: %v %s", err, body)
			}
		}
	}
	if saw503 == 0 {
		t.Fatal("never saw 503")
	}
	if r := review(t, old, "get", svmPath, ids[old]); r.Decision != v1alpha1.RouteUnavailable {
		t.Fatalf("RouteReview while the capable servers are down: %+v", r)
	}
	for _, i := range []int{new1, new2} {
		if err := cluster.StartAPIServer(i); err != nil {
			t.Fatal(err)
		}
	}
	waitReadyPeer(t, ids[new1])
	waitReadyPeer(t, ids[new2])
	waitFor(t, time.Minute, "svm served through v1.36.3 again", func() error {
		if code, _, body := raw(t, cfg, http.MethodGet, svmPath, nil); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// testExtensionStopped: with every peerdiscovery-apiserver replica down,
// the filters route from their caches, and a server restarted meanwhile
// answers 503 rather than 404; restarted, the replicas resync them.
func testExtensionStopped(t *testing.T, _ map[int]string) {
	for i := range cluster.Extensions() {
		if err := cluster.StopExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cluster.AdminConfig(old)
	waitFor(t, time.Minute, "peerdiscovery.k8s.io unavailable", func() error {
		if code, _, _ := raw(t, cfg, http.MethodGet, "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables", nil); code == http.StatusOK {
			return fmt.Errorf("still served")
		}
		return nil
	})
	for i := 0; i < 20; i++ {
		if code, _, body := raw(t, cfg, http.MethodGet, svmPath, nil); code != http.StatusOK {
			t.Fatalf("routing without peerdiscovery-apiserver: %d %s", code, body)
		}
	}
	// The old server restarted now has empty routing caches and cannot
	// fill them: for a GVR it does not serve it answers 503 (not a false
	// 404) while its filter's sync grace lasts; what it serves stays local.
	if err := cluster.StopAPIServer(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServer(old); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		code, h, body := raw(t, cfg, http.MethodGet, svmPath, nil)
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(string(body), "not synced yet") {
			t.Fatalf("restarted without peerdiscovery-apiserver: %d %s, want 503 with Retry-After", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _, body := raw(t, cfg, http.MethodGet, "/api/v1/namespaces/default", nil); code != http.StatusOK {
		t.Fatalf("a local GET on the restarted server: %d %s", code, body)
	}
	startExtensions(t, 0, 1)
	waitFor(t, time.Minute, "filter caches resynced", func() error {
		code, _, body := raw(t, cfg, http.MethodGet, "/metrics", nil)
		if code != http.StatusOK || !strings.Contains(string(body), "peerdiscovery_filter_cache_synced 1") {
			return fmt.Errorf("not synced")
		}
		if code, _, body := raw(t, cfg, http.MethodGet, svmPath, nil); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}
