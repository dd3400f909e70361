package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
)

// Issue #13: the peerdiscovery-apiserver replicas agree, and survive
// restarts, because everything that decides a route is in the API and one
// elected replica publishes while the others replicate it.

const replicasGroup = "replicas.e2e.peerdiscovery.test"

// replicaState is what replica i serves at its own address (not through
// the aggregator): every APIServerPeer and PeerRoutingTable, as JSON,
// resourceVersions included.
func replicaState(t *testing.T, i int) (string, error) {
	t.Helper()
	var b strings.Builder
	for _, res := range []string{"apiserverpeers", "peerroutingtables"} {
		code, _, body := raw(t, cluster.ExtensionConfig(i), http.MethodGet, "/apis/peerdiscovery.k8s.io/v1alpha1/"+res, nil)
		if code != http.StatusOK {
			return "", fmt.Errorf("replica %d %s: %d %s", i, res, code, body)
		}
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return "", err
		}
		for _, it := range l.Items {
			b.Write(it)
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

// waitReplicasAgree waits until both replicas serve identical objects.
func waitReplicasAgree(t *testing.T) string {
	t.Helper()
	var state string
	waitFor(t, time.Minute, "both replicas serve identical APIServerPeers and PeerRoutingTables (resourceVersions included)", func() error {
		a, err := replicaState(t, 0)
		if err != nil {
			return err
		}
		b, err := replicaState(t, 1)
		if err != nil {
			return err
		}
		if a != b {
			return fmt.Errorf("replicas differ:\n%.2000s\n---\n%.2000s", a, b)
		}
		state = a
		return nil
	})
	return state
}

func newReplicasCRD(plural string) *apiextensionsv1.CustomResourceDefinition {
	kind := strings.ToUpper(plural[:1]) + plural[1:len(plural)-1]
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + replicasGroup, Labels: map[string]string{"e2e": "replicas"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: replicasGroup, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: plural[:len(plural)-1], Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTrue()}}}},
		},
	}
}

// testReplicasAgree: watches resumed alternately on each replica's own
// address with the last resourceVersion seen continue without 410 while
// routing tables change, and the replicas serve identical objects.
func testReplicasAgree(t *testing.T, _ map[int]string) {
	waitReplicasAgree(t)
	ctx := context.Background()
	ext, err := apiextensionsclient.NewForConfig(cluster.AdminConfig(new1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e=replicas"})
	})
	code, _, body := raw(t, cluster.ExtensionConfig(0), http.MethodGet, "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables", nil)
	if code != http.StatusOK {
		t.Fatalf("list on replica 0: %d %s", code, body)
	}
	var list v1alpha1.PeerRoutingTableList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	const resumes = 20
	for i := 0; i < resumes; i++ {
		replica := i % 2
		w, err := pdFor(t, cluster.ExtensionConfig(replica)).PeerdiscoveryV1alpha1().PeerRoutingTables().Watch(ctx,
			metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("resume %d on replica %d from %s: %v (410 means the replicas do not share resourceVersions)", i, replica, rv, err)
		}
		// A change while this watch runs: a new CRD, so a new routing table.
		plural := fmt.Sprintf("things%02ds", i)
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, newReplicasCRD(plural), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := compute.RouteName(schema.GroupVersionResource{Group: replicasGroup, Version: "v1", Resource: plural})
		deadline := time.After(time.Minute)
		for seen := false; !seen; {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("resume %d on replica %d: watch ended before %s appeared", i, replica, want)
				}
				if e.Type == watch.Error {
					t.Fatalf("resume %d on replica %d: %v", i, replica, apierrors.FromObject(e.Object))
				}
				prt, ok := e.Object.(*v1alpha1.PeerRoutingTable)
				if !ok {
					t.Fatalf("unexpected object %T", e.Object)
				}
				rv = prt.ResourceVersion
				seen = e.Type == watch.Added && prt.Name == want
			case <-deadline:
				t.Fatalf("resume %d on replica %d: no ADDED %s within a minute", i, replica, want)
			}
		}
		w.Stop()
	}
	t.Logf("%d watches resumed alternately on both replicas, last resourceVersion %s: no 410", resumes, rv)
	waitReplicasAgree(t)
}

// relists sums peerdiscovery_filter_relists_total over every kube-apiserver.
var relistLine = regexp.MustCompile(`^peerdiscovery_filter_relists_total\{[^}]*\} ([0-9.e+]+)$`)

func relists(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for i := range cluster.Servers() {
		code, _, body := raw(t, cluster.AdminConfig(i), http.MethodGet, "/metrics", nil)
		if code != http.StatusOK {
			t.Fatalf("metrics of server %d: %d", i, code)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if m := relistLine.FindStringSubmatch(line); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				sum += v
			}
		}
	}
	return sum
}

func restartExtension(t *testing.T, i int) {
	t.Helper()
	if err := cluster.StopExtension(i); err != nil {
		t.Fatal(err)
	}
	startExtensions(t, i)
}

// startExtensions starts the replicas and waits for the APIService.
func startExtensions(t *testing.T, replicas ...int) {
	t.Helper()
	for _, i := range replicas {
		if err := cluster.StartExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.WaitExtensionAvailable(ctx); err != nil {
		t.Fatal(err)
	}
}

// testReplicaRestartsNoRelist: restarting the replicas one after the other
// (the leader among them) while the filters watch through the aggregator
// makes no filter relist: every watch resumes on the other replica.
func testReplicaRestartsNoRelist(t *testing.T, _ map[int]string) {
	waitReplicasAgree(t)
	// The previous step restarted every replica at once (a new timeline):
	// the filters' relists after it may still be in their backoff. Start
	// counting once the count held still for 15 s.
	var before float64
	last, since := relists(t), time.Now()
	waitFor(t, 2*time.Minute, "the filters' relist count steady", func() error {
		if n := relists(t); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) < 15*time.Second {
			return fmt.Errorf("relists %v, changed %s ago", last, time.Since(since).Round(time.Second))
		}
		before = last
		return nil
	})
	for _, i := range []int{0, 1, 0} {
		restartExtension(t, i)
		waitReplicasAgree(t)
	}
	// Give every filter watch that ended time to resume.
	time.Sleep(5 * time.Second)
	if after := relists(t); after != before {
		t.Fatalf("the filters relisted %v times while the replicas restarted one at a time", after-before)
	}
	t.Logf("filters' relists unchanged (%v) across three replica restarts", before)
}

// testTombstonesSurviveReplicaRestarts: both v1.37.2 servers leave
// gracefully; the extension replicas restart one at a time, then both at
// once. Throughout, the v1.36.3 server answers 503 with Retry-After (never
// 404) for a v1.37-only resource, and the replicas agree: the departures
// are in the API (the registration Leases), not in one replica's memory.
// Each peer transition is one Event, which kubectl describe lists.
func testTombstonesSurviveReplicaRestarts(t *testing.T, ids map[int]string) {
	mark := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	for _, i := range []int{new1, new2} {
		if err := cluster.StopAPIServer(i, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	cfg := cluster.AdminConfig(old)
	var mu sync.Mutex
	codes := map[int]int{}
	var bad []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Since(stopped) < tombstone-15*time.Second {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			code, h, body := raw(t, cfg, http.MethodGet, svmPath, nil)
			mu.Lock()
			codes[code]++
			if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
				bad = append(bad, fmt.Sprintf("%s after the stop: %d %q", time.Since(stopped).Round(time.Millisecond), code, body))
			}
			mu.Unlock()
		}
	}()
	restartExtension(t, 0)
	restartExtension(t, 1)
	for i := range cluster.Extensions() {
		if err := cluster.StopExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	startExtensions(t, 0, 1)
	waitReplicasAgree(t)
	ctx := context.Background()
	// The fresh replicas learnt both departures from the Leases.
	prt, err := pd(t, old).PeerdiscoveryV1alpha1().PeerRoutingTables().Get(ctx, compute.RouteName(svm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	for _, p := range prt.Status.Peers {
		if p.Left {
			left++
		}
	}
	if left != 2 || prt.Status.ReadyPeers != 0 {
		t.Fatalf("routing table of %s after both replicas restarted: %+v, want both v1.37.2 servers left", svm, prt.Status)
	}
	elapsed := time.Since(stopped)
	close(done)
	wg.Wait()
	mu.Lock()
	t.Logf("GET %s through v1.36.3 for %s while the replicas restarted: %v", svmPath, elapsed.Round(time.Second), codes)
	if len(bad) > 0 {
		t.Fatalf("not 503 with Retry-After (%d times), e.g. %s", len(bad), bad[0])
	}
	mu.Unlock()
	if codes[http.StatusServiceUnavailable] == 0 || elapsed > tombstone-15*time.Second {
		t.Fatalf("inconclusive: %v 503s, restarts took %s of the %s tombstone", codes[http.StatusServiceUnavailable], elapsed, tombstone)
	}

	for _, i := range []int{new1, new2} {
		if err := cluster.StartAPIServer(i); err != nil {
			t.Fatal(err)
		}
	}
	waitReadyPeer(t, ids[new1])
	waitReadyPeer(t, ids[new2])
	waitReplicasAgree(t)

	// One Event per transition, on the real object.
	for _, i := range []int{new1, new2} {
		name := compute.PeerName(ids[i])
		want := []string{engine.ReasonLeft, engine.ReasonJoined, engine.ReasonReady}
		waitFor(t, time.Minute, "one Event per transition of "+name, func() error {
			return eventsOnce(t, name, mark, want)
		})
		out, err := cluster.Kubectl("describe", "apiserverpeer", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range want {
			if !strings.Contains(out, r) {
				t.Fatalf("kubectl describe apiserverpeer %s lists no %s Event:\n%s", name, r, out)
			}
		}
	}
}

// eventsOnce checks that the Events about APIServerPeer name since mark
// are exactly one object per reason in want, each counted once.
func eventsOnce(t *testing.T, name string, mark time.Time, want []string) error {
	out, err := cluster.Kubectl("get", "events", "-A", "-o", "json",
		"--field-selector", "involvedObject.kind=APIServerPeer,involvedObject.name="+name)
	if err != nil {
		return err
	}
	var l corev1.EventList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return err
	}
	got := map[string]int{}
	var all []string
	for _, e := range l.Items {
		if e.LastTimestamp.Time.Before(mark) && e.EventTime.Time.Before(mark) {
			continue
		}
		n := int(e.Count)
		if n == 0 {
			n = 1
		}
		got[e.Reason] += n
		all = append(all, fmt.Sprintf("%s×%d from %s: %s", e.Reason, n, e.Source.Host, e.Message))
		if e.InvolvedObject.UID == "" || e.InvolvedObject.APIVersion != v1alpha1.SchemeGroupVersion.String() {
			return fmt.Errorf("event %s regards %+v, not the real object", e.Name, e.InvolvedObject)
		}
	}
	for _, r := range want {
		if got[r] != 1 {
			return fmt.Errorf("%s: %d %s Events, want 1 (all since %s: %q)", name, got[r], r, mark, all)
		}
	}
	return nil
}

// testNewIdentitySameEndpoint: a kube-apiserver that comes back under a
// new identity at the same endpoint replaces the old one at once: counted
// once, and no route names the old identity.
func testNewIdentitySameEndpoint(t *testing.T, ids map[int]string) {
	ctx := context.Background()
	oldID := ids[new2]
	if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServerAs(new2, "kube-apiserver-2-renamed"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Later runs of the suite expect the original identity.
		if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
			t.Error(err)
		}
		if err := cluster.StartAPIServerAs(new2, cluster.Servers()[new2].Name); err != nil {
			t.Error(err)
		}
		waitReadyPeer(t, oldID)
	}()
	var newID string
	waitFor(t, time.Minute, "the new identity ready", func() error {
		now := serverIDsNoWait(t)
		if now[new2] == "" || now[new2] == oldID {
			return fmt.Errorf("server %d known as %q", new2, now[new2])
		}
		newID = now[new2]
		return nil
	})
	// Within one refresh interval of the new identity being ready (the
	// refresh is 2s here; allow a few), the old identity is gone everywhere.
	waitFor(t, 10*time.Second, "the old identity retired", func() error {
		peers, err := pd(t, old).PeerdiscoveryV1alpha1().APIServerPeers().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range peers.Items {
			if p.Spec.ServerID == oldID {
				return fmt.Errorf("APIServerPeer %s still listed", p.Name)
			}
		}
		routes, err := pd(t, old).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, r := range routes.Items {
			if r.Status.TotalPeers > int32(len(cluster.Servers())) {
				return fmt.Errorf("%s counts %d peers for %d servers", r.Name, r.Status.TotalPeers, len(cluster.Servers()))
			}
			for _, p := range r.Status.Peers {
				if p.ServerID == oldID {
					return fmt.Errorf("%s still names %s", r.Name, oldID)
				}
			}
		}
		return nil
	})
	prt, err := pd(t, old).PeerdiscoveryV1alpha1().PeerRoutingTables().Get(ctx, compute.RouteName(svm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if prt.Status.TotalPeers != int32(len(cluster.Servers())) || prt.Status.ReadyPeers != 2 {
		t.Fatalf("%s after the rename: %d ready of %d total, want 2 of %d", prt.Name, prt.Status.ReadyPeers, prt.Status.TotalPeers, len(cluster.Servers()))
	}
	t.Logf("%s replaced by %s at the same endpoint", oldID, newID)
}

// serverIDsNoWait maps server index → ready peer identity, as far as known.
func serverIDsNoWait(t *testing.T) map[int]string {
	t.Helper()
	out := map[int]string{}
	peers, err := pd(t, old).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return out
	}
	for i, s := range cluster.Servers() {
		for _, p := range peers.Items {
			if strings.HasPrefix(p.Spec.Endpoint, s.IP+":") && ready(&p) && hasSource(&p, v1alpha1.PeerSourceRegistrationLease) {
				out[i] = p.Spec.ServerID
			}
		}
	}
	return out
}
