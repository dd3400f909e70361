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

package views

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// fakeLocalServer is this server's own /api and /apis (profile=nopeer),
// with ETags.
type fakeLocalServer struct {
	mu       sync.Mutex
	docs     map[string][]byte
	etags    map[string]string
	status   int
	requests map[string]int
	notMod   map[string]int
	accepts  []string
}

// startFakeLocalServer serves pods in /api and deployments in /apis.
func startFakeLocalServer(t *testing.T) (*fakeLocalServer, *httptest.Server) {
	srv := &fakeLocalServer{docs: map[string][]byte{}, etags: map[string]string{}, requests: map[string]int{}, notMod: map[string]int{}}
	srv.set("/api", `"api-1"`, dgroup("", "v1", "pods"))
	srv.set("/apis", `"apis-1"`, dgroup("apps", "v1", "deployments"))
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return srv, ts
}

func (s *fakeLocalServer) set(path string, etag string, groups ...apidiscoveryv2.APIGroupDiscovery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[path], s.etags[path] = discoveryJSON(groups...), etag
}

func (s *fakeLocalServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[r.URL.Path]++
	s.accepts = append(s.accepts, r.Header.Get("Accept"))
	if s.status != 0 {
		w.WriteHeader(s.status)
		return
	}
	doc, ok := s.docs[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", s.etags[r.URL.Path])
	if r.Header.Get("If-None-Match") == s.etags[r.URL.Path] {
		s.notMod[r.URL.Path]++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", discovery.AcceptV2+";profile=nopeer")
	_, _ = w.Write(doc)
}

func TestLocalDiscoveryRead(t *testing.T) {
	srv, ts := startFakeLocalServer(t)
	srv.set("/api", `"api-1"`, dgroup("", "v1", "pods", "configmaps"))
	srv.set("/apis", `"apis-1"`, dgroup("apps", "v1", "deployments"), dgroup("example.com", "v1", "widgets"))
	ctx := context.Background()

	client := nopeer.NewClient(ts.Client(), maxLocalDiscoveryBytes)
	l := newLocal()
	if l.Synced() || l.Serves(podsGVR) {
		t.Fatal("nothing read yet: not synced, serves nothing")
	}
	if err := l.read(ctx, client, ts.URL); err != nil {
		t.Fatal(err)
	}
	d := l.Current()
	if !l.Synced() || d.Generation != 0 || d.APIETag != `"api-1"` || d.APIsETag != `"apis-1"` || len(d.API) != 1 || len(d.APIs) != 2 {
		t.Fatalf("first read: %+v", d)
	}
	for _, g := range []struct {
		gvr  [3]string
		want bool
	}{
		{[3]string{"", "v1", "pods"}, true},
		{[3]string{"", "v1", "configmaps"}, true},
		{[3]string{"apps", "v1", "deployments"}, true},
		{[3]string{"example.com", "v1", "widgets"}, true},
		{[3]string{"example.com", "v2", "widgets"}, false},
		{[3]string{"", "v1", "deployments"}, false},
	} {
		if got := l.Serves(schemaGVR(g.gvr[0], g.gvr[1], g.gvr[2])); got != g.want {
			t.Errorf("Serves(%v) = %v", g.gvr, got)
		}
	}
	for _, a := range srv.accepts {
		if a != nopeer.Accept {
			t.Fatalf("Accept %q, want this server's own view (%q)", a, nopeer.Accept)
		}
	}

	// Unchanged: two 304s, the same document.
	if err := l.read(ctx, client, ts.URL); err != nil {
		t.Fatal(err)
	}
	if l.Current() != d || srv.notMod["/api"] != 1 || srv.notMod["/apis"] != 1 {
		t.Fatalf("unchanged documents: replaced %v, 304s %v", l.Current() != d, srv.notMod)
	}

	// /apis changed (a CRD was created): a new generation; /api is kept.
	srv.set("/apis", `"apis-2"`, dgroup("apps", "v1", "deployments"), dgroup("example.com", "v1", "widgets", "gizmos"))
	if err := l.read(ctx, client, ts.URL); err != nil {
		t.Fatal(err)
	}
	d2 := l.Current()
	if d2 == d || d2.Generation != 1 || d2.APIsETag != `"apis-2"` || d2.APIETag != `"api-1"` || len(d2.API) != 1 {
		t.Fatalf("after a change: %+v", d2)
	}
	if !l.Serves(schemaGVR("example.com", "v1", "gizmos")) || !l.Serves(podsGVR) {
		t.Fatal("the new document must be served, the kept one too")
	}

	// Failures keep the last good document.
	srv.mu.Lock()
	srv.status = http.StatusInternalServerError
	srv.mu.Unlock()
	if err := l.read(ctx, client, ts.URL); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("HTTP 500: %v", err)
	}
	srv.mu.Lock()
	srv.status = 0
	srv.docs["/apis"], srv.etags["/apis"] = []byte("{not json"), `"apis-3"`
	srv.mu.Unlock()
	if err := l.read(ctx, client, ts.URL); err == nil {
		t.Fatal("an undecodable document must be an error")
	}
	if l.Current() != d2 {
		t.Fatal("a failed read replaced the document")
	}
}

// A broken or hostile document from this server (one that merge.Validate
// refuses) is a clear error, and the last good document stays in use.
func TestLocalDiscoveryRejectsInvalidDocument(t *testing.T) {
	srv, ts := startFakeLocalServer(t)
	ctx := context.Background()
	client := nopeer.NewClient(ts.Client(), maxLocalDiscoveryBytes)
	l := newLocal()
	if err := l.read(ctx, client, ts.URL); err != nil {
		t.Fatal(err)
	}
	good := l.Current()

	for _, bad := range []struct {
		name   string
		groups []apidiscoveryv2.APIGroupDiscovery
	}{
		{"a group twice", []apidiscoveryv2.APIGroupDiscovery{dgroup("apps", "v1", "deployments"), dgroup("apps", "v1", "widgets")}},
		{"a group name that is no DNS subdomain", []apidiscoveryv2.APIGroupDiscovery{dgroup("Evil/../Group", "v1", "widgets")}},
	} {
		srv.set("/apis", `"apis-bad"`, bad.groups...)
		err := l.read(ctx, client, ts.URL)
		if err == nil || !strings.Contains(err.Error(), string(nopeer.ErrInvalid)) {
			t.Errorf("%s: read = %v, want an %s error", bad.name, err, nopeer.ErrInvalid)
		}
		if l.Current() != good || l.Serves(schemaGVR("apps", "v1", "widgets")) {
			t.Errorf("%s: the invalid document replaced the last good one", bad.name)
		}
	}
}

// startLocalLoop runs a local discovery's loop against a fake server (the
// ticker an hour apart: only events cause reads); reads counts the reads of
// /apis.
func startLocalLoop(t *testing.T) (srv *fakeLocalServer, l *Local, reads func() int) {
	srv, ts := startFakeLocalServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l = newLocal()
	go l.loop(ctx, nopeer.NewClient(ts.Client(), maxLocalDiscoveryBytes), ts.URL, time.Hour)
	return srv, l, func() int {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.requests["/apis"]
	}
}

// TestLocalDiscoveryLoop: a change event causes one read at once and one
// after each of localEventRereads, not a read every second from then on;
// the ticker alone reads at its interval.
func TestLocalDiscoveryLoop(t *testing.T) {
	_, l, reads := startLocalLoop(t)
	l.poke()
	want := 1 + len(localEventRereads)
	eventually(t, "the change event's reads", func() bool { return reads() >= want })
	time.Sleep(2 * localRereadDelay)
	if n := reads(); n != want {
		t.Fatalf("%d reads after one change event, want %d", n, want)
	}
}

// TestLocalDiscoveryChangeIsOneRead: the discovery manager's change notice
// (DiscoveryChanged) is read at once, and once: the change is in /apis
// already, and a re-read could make the server rebuild its whole /apis for
// nothing.
func TestLocalDiscoveryChangeIsOneRead(t *testing.T) {
	srv, l, reads := startLocalLoop(t)
	srv.set("/apis", `"apis-2"`, dgroup("apps", "v1", "deployments"), dgroup("batch", "v1", "jobs"))
	changed := time.Now()
	l.DiscoveryChanged()
	eventually(t, "the change read", func() bool { return l.Serves(schemaGVR("batch", "v1", "jobs")) })
	// At once: nothing waits on a timer.
	if took := time.Since(changed); took > localRereadDelay {
		t.Fatalf("the change was read %v after its notice, want within %v", took, localRereadDelay)
	}
	// A change event's first re-read would come localRereadDelay after.
	time.Sleep(2 * localRereadDelay)
	if n := reads(); n != 1 {
		t.Fatalf("%d reads after one change notice, want 1", n)
	}
}

// TestLocalDiscoveryEventDuringLateReread: an event that comes while only
// the event schedule's last, late re-read is pending is read within
// localRereadDelay, not when that re-read is due.
func TestLocalDiscoveryEventDuringLateReread(t *testing.T) {
	srv, l, reads := startLocalLoop(t)
	l.poke()
	eventually(t, "the first event's first two reads", func() bool { return reads() >= 2 })
	time.Sleep(localRereadDelay / 2)
	srv.set("/apis", `"apis-2"`, dgroup("apps", "v1", "deployments"), dgroup("batch", "v1", "jobs"))
	poked := time.Now()
	l.poke()
	eventually(t, "the second event's change read", func() bool { return l.Serves(schemaGVR("batch", "v1", "jobs")) })
	// Within the least spacing of event reads, and one more for timers
	// late under -race; the pending re-read was localEventRereads' last
	// (4 s) after the second read.
	if took := time.Since(poked); took > 2*localRereadDelay {
		t.Fatalf("the change was read %v after its event, want within %v", took, 2*localRereadDelay)
	}
}

// TestLocalDiscoveryCoalescesEventBursts: change events that keep coming
// (a thousand CRDs applied) cause at most one read per localRereadDelay,
// not one read after another, and the burst's last change is still read.
func TestLocalDiscoveryCoalescesEventBursts(t *testing.T) {
	srv, l, reads := startLocalLoop(t)
	burst := 5 * localRereadDelay / 2
	events := 0
	for start := time.Now(); time.Since(start) < burst; events++ {
		l.poke()
		time.Sleep(10 * time.Millisecond)
	}
	srv.set("/apis", `"apis-2"`, dgroup("apps", "v1", "deployments"), dgroup("batch", "v1", "jobs"))
	l.poke()
	eventually(t, "the burst's last change read", func() bool { return l.Serves(schemaGVR("batch", "v1", "jobs")) })
	time.Sleep(3 * localRereadDelay)
	// One read per delay during the burst (at 0, 1 s and 2 s), the two
	// within a delay of its last event (the one after localEventRereads'
	// last delay comes after this count), and one for timers late under
	// -race.
	if n, most := reads(), int(burst/localRereadDelay)+1+2+1; n > most {
		t.Fatalf("%d reads for %d change events over %v, want at most %d", n, events, burst, most)
	}
}

// TestLocalDiscoveryKeepsOnlyCRDIdentity checks that the filter's CRD and
// APIService informers store an object's identity only: a CRD's
// managedFields and annotations are about the size of its schema, and the
// server already holds them once.
func TestLocalDiscoveryKeepsOnlyCRDIdentity(t *testing.T) {
	local, _ := startFakeLocalServer(t)
	const crd = `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"widgets.example.com","uid":"u-1","resourceVersion":"1","generation":2,` +
		`"labels":{"team":"a"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"versions\":[]}}"},` +
		`"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"apiextensions.k8s.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]}}`
	const apiService = `{"kind":"APIService","apiVersion":"apiregistration.k8s.io/v1","metadata":{"name":"v1beta1.metrics.k8s.io","uid":"u-2","resourceVersion":"1",` +
		`"labels":{"team":"a"},"annotations":{"a":"b"}},` +
		`"spec":{"group":"metrics.k8s.io","version":"v1beta1","service":{"namespace":"kube-system","name":"metrics-server"},"caBundle":"Y2E=","groupPriorityMinimum":100,"versionPriority":100},` +
		`"status":{"conditions":[{"type":"Available","status":"True"}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apis/apiextensions.k8s.io/v1/customresourcedefinitions":
			serveListOrWatchList(w, r, "meta.k8s.io/v1", "PartialObjectMetadata", crd)
		case "/apis/apiregistration.k8s.io/v1/apiservices":
			serveListOrWatchList(w, r, "apiregistration.k8s.io/v1", "APIService", apiService)
		default:
			local.ServeHTTP(w, r)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l := newLocal()
	if err := l.Start(ctx, &rest.Config{Host: srv.URL}, time.Hour); err != nil {
		t.Fatal(err)
	}
	eventually(t, "CRDs synced", l.crds.HasSynced)
	obj, ok, err := l.crds.GetStore().GetByKey("widgets.example.com")
	if err != nil || !ok {
		t.Fatalf("CRD widgets.example.com not in the informer's store (err %v)", err)
	}
	m := obj.(*metav1.PartialObjectMetadata)
	if m.Name != "widgets.example.com" || m.UID != "u-1" || m.ResourceVersion != "1" || m.Generation != 2 {
		t.Errorf("stored CRD identity = %q %q %q %d, want widgets.example.com u-1 1 2", m.Name, m.UID, m.ResourceVersion, m.Generation)
	}
	if len(m.ManagedFields) != 0 || len(m.Annotations) != 0 || len(m.Labels) != 0 {
		t.Errorf("stored CRD keeps %d managedFields, %d annotations, %d labels; want only its identity", len(m.ManagedFields), len(m.Annotations), len(m.Labels))
	}

	// An APIService keeps its identity and what clusterwide.APIService
	// reads: its group-version and whether it has a service.
	eventually(t, "APIServices synced", l.apiServices.HasSynced)
	obj, ok, err = l.apiServices.GetStore().GetByKey("v1beta1.metrics.k8s.io")
	if err != nil || !ok {
		t.Fatalf("APIService v1beta1.metrics.k8s.io not in the informer's store (err %v)", err)
	}
	want := map[string]interface{}{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]interface{}{"name": "v1beta1.metrics.k8s.io", "uid": "u-2", "resourceVersion": "1"},
		"spec":     map[string]interface{}{"group": "metrics.k8s.io", "version": "v1beta1", "service": map[string]interface{}{}},
	}
	if got := obj.(*unstructured.Unstructured).Object; !reflect.DeepEqual(got, want) {
		t.Errorf("stored APIService %v, want %v", got, want)
	}
	if !l.isAggregated(schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}) {
		t.Error("an APIService with a service is aggregated")
	}
}

// TestLocalKnowsWhetherTheViewIsRegistered: peerdiscovery's APIService,
// read by the same informer, says whether a routing view is expected
// (routing.DecideRoot serves stock discovery without one).
func TestLocalKnowsWhetherTheViewIsRegistered(t *testing.T) {
	apiService := func(name, group, version string) string {
		return `{"kind":"APIService","apiVersion":"apiregistration.k8s.io/v1","metadata":{"name":"` + name + `","uid":"u-` + name + `","resourceVersion":"1"},` +
			`"spec":{"group":"` + group + `","version":"` + version + `","service":{"namespace":"peerdiscovery","name":"peerdiscovery-apiserver"},"groupPriorityMinimum":100,"versionPriority":100}}`
	}
	for _, tc := range []struct {
		name  string
		items []string
		want  bool
	}{
		{"another APIService only", []string{apiService("v1beta1.metrics.k8s.io", "metrics.k8s.io", "v1beta1")}, false},
		{"peerdiscovery's", []string{apiService("v1beta1.metrics.k8s.io", "metrics.k8s.io", "v1beta1"), apiService("v1alpha1.peerdiscovery.k8s.io", "peerdiscovery.k8s.io", "v1alpha1")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, _ := startFakeLocalServer(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/apis/apiextensions.k8s.io/v1/customresourcedefinitions":
					serveListOrWatchList(w, r, "meta.k8s.io/v1", "PartialObjectMetadata")
				case "/apis/apiregistration.k8s.io/v1/apiservices":
					serveListOrWatchList(w, r, "apiregistration.k8s.io/v1", "APIService", tc.items...)
				default:
					local.ServeHTTP(w, r)
				}
			}))
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			v := New(Config{Now: time.Now})
			if err := v.Local.Start(ctx, &rest.Config{Host: srv.URL}, time.Hour); err != nil {
				t.Fatal(err)
			}
			eventually(t, "APIServices synced", v.Local.apiServices.HasSynced)
			if got := v.Snapshot().ViewRegistered; got != tc.want {
				t.Errorf("snapshot's ViewRegistered = %v, want %v", got, tc.want)
			}
		})
	}
}
