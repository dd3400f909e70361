package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
)

// waitTimeout bounds every wait for the engine: generous, since the
// machine may be busy; never a measure of speed.
const waitTimeout = 60 * time.Second

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// ---- documents ----

func res(name string) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list", "watch"}}
}

func ver(v string, rs ...string) apidiscoveryv2.APIVersionDiscovery {
	out := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	for _, r := range rs {
		out.Resources = append(out.Resources, res(r))
	}
	return out
}

func grp(name string, vs ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: vs}
}

// document is a peer's discovery: core/v1 pods plus the given /apis groups,
// with content ETags.
func document(version string, apis ...apidiscoveryv2.APIGroupDiscovery) Document {
	api := []apidiscoveryv2.APIGroupDiscovery{grp("", ver("v1", "pods", "configmaps"))}
	apiETag, err := merge.ETag(api)
	if err != nil {
		panic(err)
	}
	apisETag, err := merge.ETag(apis)
	if err != nil {
		panic(err)
	}
	return Document{API: api, APIs: apis, APIETag: apiETag, APIsETag: apisETag, Version: version}
}

// ---- the scripted scraper ----

type scrapeCall struct {
	endpoint, apiETag, apisETag string
	deadline                    time.Time
	hasDeadline                 bool
}

type behavior func(ctx context.Context, apiETag, apisETag string) (Document, error)

// fakeScraper answers per endpoint from a script; safe for concurrent use.
type fakeScraper struct {
	mu     sync.Mutex
	script map[string]behavior
	calls  []scrapeCall
}

func newFakeScraper() *fakeScraper { return &fakeScraper{script: map[string]behavior{}} }

func (f *fakeScraper) set(endpoint string, b behavior) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[endpoint] = b
}

func (f *fakeScraper) Scrape(ctx context.Context, endpoint, apiETag, apisETag string) (Document, error) {
	dl, ok := ctx.Deadline()
	f.mu.Lock()
	b := f.script[endpoint]
	f.calls = append(f.calls, scrapeCall{endpoint: endpoint, apiETag: apiETag, apisETag: apisETag, deadline: dl, hasDeadline: ok})
	f.mu.Unlock()
	if b == nil {
		return Document{}, &ScrapeError{Type: ErrRefused, Path: "/api", Err: errors.New("connect: connection refused (unscripted endpoint)")}
	}
	return b(ctx, apiETag, apisETag)
}

func (f *fakeScraper) callsTo(endpoint string) []scrapeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []scrapeCall
	for _, c := range f.calls {
		if c.endpoint == endpoint {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeScraper) endpoints() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if !slices.Contains(out, c.endpoint) {
			out = append(out, c.endpoint)
		}
	}
	return out
}

// serve answers doc, or NotModified when both ETags match, like a real
// server's 304s.
func serve(doc Document) behavior {
	return func(_ context.Context, apiETag, apisETag string) (Document, error) {
		if apiETag == doc.APIETag && apisETag == doc.APIsETag {
			return Document{APIETag: doc.APIETag, APIsETag: doc.APIsETag, Version: doc.Version, NotModified: true}, nil
		}
		return doc, nil
	}
}

func fail(typ ErrorType) behavior {
	return func(context.Context, string, string) (Document, error) {
		return Document{}, &ScrapeError{Type: typ, Path: "/apis", Err: fmt.Errorf("scripted %s", typ)}
	}
}

// hang blocks until the scrape's context ends, counting outstanding hangs,
// and fails as the real scraper does.
func hang(outstanding *sync.WaitGroup, count *int32Counter) behavior {
	return func(ctx context.Context, _, _ string) (Document, error) {
		count.add(1)
		if outstanding != nil {
			outstanding.Add(1)
			defer outstanding.Done()
		}
		<-ctx.Done()
		count.add(-1)
		return Document{}, &ScrapeError{Type: ErrTimeout, Path: "/api", Err: ctx.Err()}
	}
}

// gated blocks until release is closed, then answers doc.
func gated(release <-chan struct{}, started chan<- struct{}, doc Document) behavior {
	var once sync.Once
	return func(ctx context.Context, _, _ string) (Document, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
			return doc, nil
		case <-ctx.Done():
			return Document{}, &ScrapeError{Type: ErrTimeout, Path: "/api", Err: ctx.Err()}
		}
	}
}

type int32Counter struct {
	mu sync.Mutex
	n  int32
}

func (c *int32Counter) add(d int32) {
	c.mu.Lock()
	c.n += d
	c.mu.Unlock()
}

func (c *int32Counter) get() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// ---- the recording publisher ----

// recordingPublisher keeps every View; safe for concurrent use.
type recordingPublisher struct {
	mu     sync.Mutex
	views  []registry.View
	notify chan struct{}
}

var _ registry.Publisher = &recordingPublisher{}

func newRecordingPublisher() *recordingPublisher {
	return &recordingPublisher{notify: make(chan struct{})}
}

func (r *recordingPublisher) Publish(v registry.View) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.views = append(r.views, v)
	close(r.notify)
	r.notify = make(chan struct{})
	return nil
}

func (r *recordingPublisher) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.views)
}

// since returns the views published from index n on.
func (r *recordingPublisher) since(n int) []registry.View {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.views[n:])
}

// waitFor waits until the latest view satisfies pred and returns it.
func (r *recordingPublisher) waitFor(t *testing.T, what string, pred func(registry.View) bool) registry.View {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var last *registry.View
		if len(r.views) > 0 {
			last = &r.views[len(r.views)-1]
		}
		ch := r.notify
		r.mu.Unlock()
		if last != nil && pred(*last) {
			return *last
		}
		select {
		case <-ch:
		case <-deadline.C:
			if last == nil {
				t.Fatalf("timed out waiting for %s: nothing published", what)
			}
			t.Fatalf("timed out waiting for %s; last view:\n%s", what, describe(*last))
		}
	}
}

func describe(v registry.View) string {
	var b strings.Builder
	for _, p := range v.Peers {
		c := p.Status.Conditions[0]
		fmt.Fprintf(&b, "peer %s (%s) at %s sources %v ready=%s/%s stale=%v left=%v resources=%d\n", p.Name, p.Spec.ServerID, p.Spec.Endpoint,
			p.Spec.Sources, c.Status, c.Reason, p.Status.Stale, p.Status.LeftTime != nil, p.Status.ResourceCount)
	}
	for _, r := range v.Routes {
		fmt.Fprintf(&b, "route %s peers %+v clusterWide=%v %s\n", r.Name, r.Status.Peers, r.Status.ClusterWide, r.Status.ClusterWideSource)
	}
	return b.String()
}

func peerOf(v registry.View, id string) *v1alpha1.APIServerPeer {
	for i := range v.Peers {
		if v.Peers[i].Spec.ServerID == id {
			return &v.Peers[i]
		}
	}
	return nil
}

func routeOf(v registry.View, name string) *v1alpha1.PeerRoutingTable {
	for i := range v.Routes {
		if v.Routes[i].Name == name {
			return &v.Routes[i]
		}
	}
	return nil
}

func readyCond(p *v1alpha1.APIServerPeer) metav1.Condition {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

func isReady(v registry.View, id string) bool {
	p := peerOf(v, id)
	return p != nil && readyCond(p).Status == metav1.ConditionTrue
}

func hasGroupVersion(v registry.View, g, ver string) bool {
	if v.Discovery == nil {
		return false
	}
	for _, list := range [][]apidiscoveryv2.APIGroupDiscovery{v.Discovery.Status.API.Items, v.Discovery.Status.APIs.Items} {
		for _, gr := range list {
			if gr.Name != g {
				continue
			}
			for _, vr := range gr.Versions {
				if vr.Version == ver {
					return true
				}
			}
		}
	}
	return false
}

func routedGV(v registry.View, g, ver string) bool {
	for _, r := range v.Routes {
		if r.Spec.Group == g && r.Spec.Version == ver {
			return true
		}
	}
	return false
}

// ---- objects ----

// regLease is a registration lease renewed now, lasting a day so that
// stepping the fake clock does not make it lapse.
func regLease(id, endpoint, version string, now time.Time) *coordinationv1.Lease {
	l := peerlease.NewRegistrationLease(nil, id, endpoint, version, now)
	l.Spec.LeaseDurationSeconds = ptr.To[int32](86400)
	return l
}

func identityLease(name, address string, now time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: peerlease.Namespace,
			Labels: map[string]string{peerlease.IdentityLabel: peerlease.IdentityComponent},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name + "_0b5e1c4d-8f2a-4c3e-9d7b-6a1f2e3d4c5b"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime:            ptr.To(metav1.NewMicroTime(now)),
		},
	}
	if address != "" {
		l.Annotations = map[string]string{peerlease.PeerAdvertiseAddressAnnotation: address}
	}
	return l
}

func kubernetesSlice(name string, port int32, addresses ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addresses {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func crd(group, plural string, versions map[string]bool) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "Thing"},
		},
	}
	names := make([]string, 0, len(versions))
	for v := range versions {
		names = append(names, v)
	}
	slices.Sort(names)
	for _, v := range names {
		c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: versions[v], Storage: v == names[0]})
	}
	return c
}

func apiService(group, version string, service bool) *apiregistrationv1.APIService {
	as := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: version + "." + group},
		Spec:       apiregistrationv1.APIServiceSpec{Group: group, Version: version, GroupPriorityMinimum: 100, VersionPriority: 100},
	}
	if service {
		as.Spec.Service = &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server", Port: ptr.To[int32](443)}
	}
	return as
}

// ---- the harness ----

type harness struct {
	t       *testing.T
	opts    Options
	kube    *fake.Clientset
	ext     *extfake.Clientset
	agg     *aggfake.Clientset
	clk     *testingclock.FakeClock
	scraper *fakeScraper
	pub     *recordingPublisher
	rec     *record.FakeRecorder
	eng     *Engine
	events  []string
	done    chan error
	cancel  context.CancelFunc
}

type seed struct {
	kube []runtime.Object
	ext  []runtime.Object
	agg  []runtime.Object
}

func testOptions() Options {
	o := NewOptions()
	o.ScrapeTimeout = 30 * time.Second // never reached unless a test hangs a scrape
	o.RefreshInterval = 10 * time.Second
	o.TombstonePeriod = 5 * time.Minute
	o.IdentityLeaseStaleAfter = 45 * time.Second
	return *o
}

// newHarness builds the engine over fake clients holding the seed objects.
// Script the scraper before calling start.
func newHarness(t *testing.T, opts Options, s seed) *harness {
	t.Helper()
	h := &harness{
		t: t, opts: opts,
		kube:    fake.NewClientset(s.kube...),
		ext:     extfake.NewClientset(s.ext...),
		agg:     aggfake.NewClientset(s.agg...),
		clk:     testingclock.NewFakeClock(t0),
		scraper: newFakeScraper(),
		pub:     newRecordingPublisher(),
		rec:     record.NewFakeRecorder(10000),
	}
	clients := Clients{Kube: h.kube, APIExtensions: h.ext, Aggregator: h.agg}
	eng, err := New(opts, clients, nil, h.pub, h.scraper.Scrape, h.clk)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	eng.recorder = h.rec
	h.eng = eng
	return h
}

func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.eng.Run(ctx) }()
	h.t.Cleanup(h.stop)
	// The ticker exists once the informers synced; ticks need it.
	deadline := time.Now().Add(waitTimeout)
	for !h.clk.HasWaiters() {
		if time.Now().After(deadline) {
			h.t.Fatal("the engine never started its refresh ticker")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		h.t.Error("Run did not return after its context ended")
	}
}

// tick moves the fake clock one refresh interval on, which fires a refresh.
func (h *harness) tick() { h.clk.Step(h.opts.RefreshInterval) }

// refresh fires one refresh and waits until endpoint was scraped again
// (one tick makes the engine read every peer: idle ones at once, busy ones
// as soon as their scrape ends).
func (h *harness) refresh(endpoint string) {
	h.t.Helper()
	before := len(h.scraper.callsTo(endpoint))
	h.tick()
	h.waitCalls(endpoint, before+1)
}

// waitCalls waits until endpoint was scraped at least n times.
func (h *harness) waitCalls(endpoint string, n int) []scrapeCall {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		calls := h.scraper.callsTo(endpoint)
		if len(calls) >= n {
			return calls
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s scraped %d times, waited for %d", endpoint, len(calls), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drainEvents moves the recorded events into h.events and returns them.
func (h *harness) drainEvents() []string {
	for {
		select {
		case e := <-h.rec.Events:
			h.events = append(h.events, e)
		default:
			return h.events
		}
	}
}

// eventsFor returns "Type Reason" of the events about one peer, in order.
func (h *harness) eventsFor(id string) []string {
	var out []string
	for _, e := range h.drainEvents() {
		if strings.Contains(e, "Peer "+id+" ") {
			f := strings.Fields(e)
			out = append(out, f[0]+" "+f[1])
		}
	}
	return out
}
