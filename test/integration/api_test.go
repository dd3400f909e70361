package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	informers "sigs.k8s.io/peerdiscovery/pkg/generated/informers/externalversions"
)

func TestReadinessFollowsTheView(t *testing.T) {
	ts := startServer(t)
	code, body := ts.get(t, ts.anonymous(), "/readyz")
	if code == http.StatusOK {
		t.Fatalf("ready before any view was published: %s", body)
	}
	if err := ts.srv.View.Publish(view(0, true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "ready after publish", func() error {
		if code, body := ts.get(t, ts.anonymous(), "/readyz"); code != http.StatusOK {
			return errorf("readyz %d: %s", code, body)
		}
		return nil
	})
	ts.clock.Step(2 * time.Minute) // past StaleAfter with no new view
	code, body = ts.get(t, ts.anonymous(), "/readyz?verbose")
	if code == http.StatusOK || !strings.Contains(body, "peerdiscovery-view") {
		t.Fatalf("stale view still ready: %d %s", code, body)
	}
}

func TestListGetWatchSelectors(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	if err := ts.srv.View.Publish(view(10, true)); err != nil {
		t.Fatal(err)
	}
	c := ts.clientset(t, ts.admin()).PeerdiscoveryV1alpha1()

	list, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(list.Items); got != 12 { // apps deployments, deviceclasses, 10 things
		t.Fatalf("routing tables: got %d, want 12", got)
	}
	rt, err := c.PeerRoutingTables().Get(ctx, "deviceclasses.v1beta2.resource.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Status.ServedByAll || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].ServerID != "kube-apiserver-a" || rt.UID == "" {
		t.Fatalf("unexpected routing table: %+v", rt)
	}
	if _, err := c.PeerRoutingTables().Get(ctx, "nope.v1.core", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get of a missing table: %v, want NotFound", err)
	}

	// Field selectors: the GVRs not served by every peer, one group, one resource.
	notAll, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "status.servedByAll=false"})
	if err != nil {
		t.Fatal(err)
	}
	if len(notAll.Items) != 11 {
		t.Fatalf("servedByAll=false: got %d, want 11", len(notAll.Items))
	}
	apps, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "spec.group=apps,spec.resource=deployments"})
	if err != nil {
		t.Fatal(err)
	}
	if len(apps.Items) != 1 || !apps.Items[0].Status.ServedByAll {
		t.Fatalf("apps deployments: %+v", apps.Items)
	}
	if _, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "status.bogus=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector: %v, want BadRequest", err)
	}
	if err := ts.srv.View.Publish(view(10, false)); err != nil {
		t.Fatal(err)
	}
	notReady, err := c.APIServerPeers().List(ctx, metav1.ListOptions{FieldSelector: "status.ready=false"})
	if err != nil {
		t.Fatal(err)
	}
	if len(notReady.Items) != 1 || notReady.Items[0].Spec.ServerID != "kube-apiserver-b" {
		t.Fatalf("not-ready peers: %+v", notReady.Items)
	}

	// Watch from a resourceVersion replays exactly what came after it.
	list, err = c.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.View.Publish(view(11, false)); err != nil { // adds things0010
		t.Fatal(err)
	}
	w, err := c.PeerRoutingTables().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := next(t, w)
	if ev.Type != watch.Added || ev.Object.(*v1alpha1.PeerRoutingTable).Name != "things0010.v1.example.com" {
		t.Fatalf("replayed event: %s %v", ev.Type, ev.Object)
	}

	// An expired (or other replica's) resourceVersion is 410 Gone.
	_, err = c.PeerRoutingTables().Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from a foreign resourceVersion: %v, want 410", err)
	}
	// A future one of this replica is the standard "too large" error.
	var rv uint64
	if _, err := fmtSscan(list.ResourceVersion, &rv); err != nil {
		t.Fatal(err)
	}
	_, err = c.PeerRoutingTables().List(ctx, metav1.ListOptions{ResourceVersion: u64(rv + 1000), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if !storage.IsTooLargeResourceVersion(err) {
		t.Fatalf("list at a future resourceVersion: %v, want too large", err)
	}

	// Writes are not served.
	err = c.RESTClient().Delete().Resource("peerroutingtables").Name("deployments.v1.apps").Do(ctx).Error()
	if !apierrors.IsMethodNotSupported(err) && !apierrors.IsNotFound(err) {
		t.Fatalf("delete: %v, want 405", err)
	}
}

func TestWatchListBookmarkAndInformer(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ts.srv.View.Publish(view(3, true)); err != nil {
		t.Fatal(err)
	}
	cs := ts.clientset(t, ts.admin())
	w, err := cs.PeerdiscoveryV1alpha1().PeerRoutingTables().Watch(ctx, metav1.ListOptions{
		SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for {
		ev := next(t, w)
		if ev.Type == watch.Added {
			added++
			continue
		}
		if ev.Type != watch.Bookmark {
			t.Fatalf("unexpected %s before the initial-events-end bookmark", ev.Type)
		}
		m, _ := metaAccessor(ev.Object)
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			t.Fatalf("bookmark without %s: %v", metav1.InitialEventsAnnotationKey, m.GetAnnotations())
		}
		break
	}
	w.Stop()
	if added != 5 {
		t.Fatalf("initial events: got %d, want 5", added)
	}

	// A shared informer (WatchList on) syncs and follows changes.
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Peerdiscovery().V1alpha1().PeerRoutingTables()
	lister := inf.Lister()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("informer did not sync")
	}
	if items, _ := lister.List(everything()); len(items) != 5 {
		t.Fatalf("informer cache: %d items, want 5", len(items))
	}
	if err := ts.srv.View.Publish(view(4, true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "informer sees the new table", func() error {
		if _, err := lister.Get("things0003.v1.example.com"); err != nil {
			return err
		}
		return nil
	})
}

func TestTableOutputAndOpenAPI(t *testing.T) {
	ts := startServer(t)
	if err := ts.srv.View.Publish(view(1, true)); err != nil {
		t.Fatal(err)
	}
	accept := "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
	for path, cols := range map[string][]string{
		"/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables":         {"Name", "Group", "Version", "Resource", "Ready", "Served-By-All", "Cluster-Wide", "Age"},
		"/apis/peerdiscovery.k8s.io/v1alpha1/apiserverpeers":            {"Name", "Endpoint", "Version", "Ready", "GVRs", "Last-Sync", "Age"},
		"/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries": {"Name", "Groups", "Peers", "ETag", "Age"},
	} {
		code, body := ts.get(t, ts.admin(), path, "Accept", accept)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var table metav1.Table
		if err := json.Unmarshal([]byte(body), &table); err != nil {
			t.Fatal(err)
		}
		if table.Kind != "Table" || len(table.Rows) == 0 {
			t.Fatalf("%s: not a table with rows: %s", path, body)
		}
		for _, want := range cols {
			found := false
			for _, c := range table.ColumnDefinitions {
				found = found || c.Name == want
			}
			if !found {
				t.Errorf("%s: no column %q in %v", path, want, table.ColumnDefinitions)
			}
		}
	}
	// Clients that prefer protobuf with a JSON fallback (the garbage
	// collector, the namespace controller) get JSON, not a 406.
	code, body := ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables", "Accept", "application/vnd.kubernetes.protobuf, application/json")
	if code != http.StatusOK || !strings.HasPrefix(body, "{") {
		t.Fatalf("protobuf-then-JSON list: %d %.200s", code, body)
	}
	code, body = ts.get(t, ts.admin(), "/openapi/v3/apis/peerdiscovery.k8s.io/v1alpha1")
	if code != http.StatusOK || !strings.Contains(body, "io.k8s.peerdiscovery.v1alpha1.PeerRoutingTable") {
		t.Fatalf("openapi v3: %d %.300s", code, body)
	}
	code, body = ts.get(t, ts.admin(), "/openapi/v2")
	if code != http.StatusOK || !strings.Contains(body, "io.k8s.peerdiscovery.v1alpha1.APIServerPeer") {
		t.Fatalf("openapi v2: %d %.300s", code, body)
	}
	// Discovery advertises short names and the category.
	code, body = ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1")
	if code != http.StatusOK || !strings.Contains(body, `"prt"`) || !strings.Contains(body, `"peerdiscovery"`) {
		t.Fatalf("discovery: %d %s", code, body)
	}
}

func TestAuthnAuthz(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	if err := ts.srv.View.Publish(view(1, true)); err != nil {
		t.Fatal(err)
	}
	// Unauthenticated: no credentials, or a token nobody issued.
	if _, err := ts.clientset(t, ts.anonymous()).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("anonymous list: %v, want 401", err)
	}
	bad := ts.anonymous()
	bad.BearerToken = "not-a-token"
	if _, err := ts.clientset(t, bad).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("bad token list: %v, want 401", err)
	}
	// Authenticated without the reader role: 403.
	if _, err := ts.clientset(t, ts.config("nobody")).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list without RBAC: %v, want 403", err)
	}
	// With the reader role from artifacts/ (applied to the real cluster): allowed.
	if out, err := cluster.Kubectl("apply", "-f", repoPath("artifacts/deploy/base/rbac.yaml")); err != nil {
		// The namespaced parts need the namespace.
		if _, err2 := cluster.Kubectl("apply", "-f", repoPath("artifacts/deploy/base/namespace.yaml")); err2 != nil {
			t.Fatalf("applying rbac.yaml: %v: %s", err, out)
		}
		if out, err = cluster.Kubectl("apply", "-f", repoPath("artifacts/deploy/base/rbac.yaml")); err != nil {
			t.Fatalf("applying rbac.yaml: %v: %s", err, out)
		}
	}
	kube, err := kubernetes.NewForConfig(cluster.AdminConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "integration-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "peerdiscovery-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "reader"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	reader := ts.clientset(t, ts.config("reader")).PeerdiscoveryV1alpha1()
	waitFor(t, 30*time.Second, "reader allowed", func() error {
		_, err := reader.PeerRoutingTables().List(ctx, metav1.ListOptions{})
		return err
	})
	review, err := reader.RouteReviews().Create(ctx, &v1alpha1.RouteReview{Spec: v1alpha1.RouteReviewSpec{
		Verb: "get", Path: "/apis/resource.k8s.io/v1beta2/deviceclasses", SourcePeer: "kube-apiserver-b",
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if review.Status.Decision != v1alpha1.RouteProxy || review.Status.Target != "kube-apiserver-a" || review.Status.Reason == "" {
		t.Fatalf("route review: %+v", review.Status)
	}
	// The reader cannot write routing state.
	if err := reader.RESTClient().Delete().Resource("peerroutingtables").Name("deployments.v1.apps").Do(ctx).Error(); err == nil {
		t.Fatal("reader deleted a routing table")
	}
	// Health endpoints stay open to probes.
	if code, body := ts.get(t, ts.anonymous(), "/livez"); code != http.StatusOK {
		t.Fatalf("anonymous livez: %d %s", code, body)
	}
}

// A peer turning NotReady and back changes its APIServerPeer, not every
// routing table naming it: readiness is completed at read time.
func TestPeerFlapChangesOnlyThePeer(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	if err := ts.srv.View.Publish(view(10, true)); err != nil {
		t.Fatal(err)
	}
	c := ts.clientset(t, ts.admin()).PeerdiscoveryV1alpha1()
	deployments := func() *v1alpha1.PeerRoutingTable {
		t.Helper()
		rt, err := c.PeerRoutingTables().Get(ctx, "deployments.v1.apps", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	readyOf := func(rt *v1alpha1.PeerRoutingTable) map[string]bool {
		m := map[string]bool{}
		for _, p := range rt.Status.Peers {
			m[p.ServerID] = p.Ready
		}
		return m
	}
	if rt := deployments(); rt.Status.ReadyPeers != 2 || !readyOf(rt)["kube-apiserver-b"] {
		t.Fatalf("both ready: %+v", rt.Status)
	}
	routes, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	peers, err := c.APIServerPeers().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := c.PeerRoutingTables().Watch(ctx, metav1.ListOptions{ResourceVersion: routes.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()
	pw, err := c.APIServerPeers().Watch(ctx, metav1.ListOptions{ResourceVersion: peers.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Stop()

	// Flap b three times; then add one table as a sentinel.
	for _, ready := range []bool{false, true, false} {
		if err := ts.srv.View.Publish(view(10, ready)); err != nil {
			t.Fatal(err)
		}
		e := next(t, pw)
		if p := e.Object.(*v1alpha1.APIServerPeer); e.Type != watch.Modified || p.Spec.ServerID != "kube-apiserver-b" {
			t.Fatalf("peer event: %s %s", e.Type, p.Name)
		}
	}
	if err := ts.srv.View.Publish(view(11, false)); err != nil {
		t.Fatal(err)
	}
	if e := next(t, rw); e.Type != watch.Added || e.Object.(*v1alpha1.PeerRoutingTable).Name != "things0010.v1.example.com" {
		t.Fatalf("first routing-table event after three flaps: %s %s, want only the sentinel", e.Type, e.Object.(*v1alpha1.PeerRoutingTable).Name)
	}

	// Reads still show readiness as it is now, in objects and in tables.
	if rt := deployments(); rt.Status.ReadyPeers != 1 || readyOf(rt)["kube-apiserver-b"] || !readyOf(rt)["kube-apiserver-a"] {
		t.Fatalf("b not ready: %+v", rt.Status)
	}
	accept := "application/json;as=Table;v=v1;g=meta.k8s.io"
	code, body := ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables/deployments.v1.apps", "Accept", accept)
	if code != http.StatusOK || !strings.Contains(body, `"1/2"`) {
		t.Fatalf("table of deployments with b not ready: %d %s", code, body)
	}
	if err := ts.srv.View.Publish(view(11, true)); err != nil {
		t.Fatal(err)
	}
	if rt := deployments(); rt.Status.ReadyPeers != 2 {
		t.Fatalf("b ready again: %+v", rt.Status)
	}
	// The selector on membership keeps working.
	notAll, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "status.servedByAll=false"})
	if err != nil || len(notAll.Items) != 12 {
		t.Fatalf("servedByAll=false after flaps: %d items, %v", len(notAll.Items), err)
	}
}

// The merged discovery object is large at scale: a GET of it is
// gzip-compressed for clients that accept gzip.
func TestLargeDiscoveryObjectIsCompressed(t *testing.T) {
	ts := startServer(t)
	if err := ts.srv.View.Publish(view(3000, true)); err != nil {
		t.Fatal(err)
	}
	path := "/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries/cluster"
	code, plain := ts.get(t, ts.admin(), path, "Accept", "application/json")
	if code != http.StatusOK || len(plain) < 128<<10 {
		t.Fatalf("plain GET: %d, %d bytes (want over 128 KiB for this test)", code, len(plain))
	}
	code, zipped := ts.get(t, ts.admin(), path, "Accept", "application/json", "Accept-Encoding", "gzip")
	if code != http.StatusOK || !strings.HasPrefix(zipped, "\x1f\x8b") || len(zipped) > len(plain)/3 {
		t.Fatalf("gzip GET: %d, %d bytes of %d, gzip magic %v", code, len(zipped), len(plain), strings.HasPrefix(zipped, "\x1f\x8b"))
	}
	t.Logf("merged discovery object: %d bytes, %d gzip-compressed", len(plain), len(zipped))
}
