// Package engine learns the kube-apiservers of a control plane (from
// registration and identity Leases and the default/kubernetes
// EndpointSlices), reads their discovery, and publishes the computed
// objects. All state is owned by one goroutine; scrapes run beside it,
// bounded, each with its own deadline, so one hung peer delays no other.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	aggregatorinformers "k8s.io/kube-aggregator/pkg/client/informers/externalversions"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
)

// Event reasons, one per peer transition.
const (
	ReasonJoined   = "PeerJoined"
	ReasonReady    = "PeerReady"
	ReasonNotReady = "PeerNotReady"
	ReasonLeft     = "PeerLeft"
	ReasonRemoved  = "PeerTombstoneExpired"
	// ReasonReplaced: a newer identity registered at the peer's endpoint,
	// which retires the peer at once (no tombstone).
	ReasonReplaced = "PeerReplaced"
)

// Clients are the API clients the engine watches through.
type Clients struct {
	Kube          kubernetes.Interface
	APIExtensions apiextensionsclient.Interface
	Aggregator    aggregatorclient.Interface
}

// NewClients builds the clients from one config.
func NewClients(cfg *rest.Config) (Clients, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Kube: kube, APIExtensions: ext, Aggregator: agg}, nil
}

// Scrape reads one peer's discovery; *Scraper implements it.
type ScrapeFunc func(ctx context.Context, endpoint, apiETag, apisETag string) (Document, error)

// Engine is the peer engine.
type Engine struct {
	opts      Options
	clock     clock.WithTicker
	scrape    ScrapeFunc
	publisher registry.Publisher
	recorder  record.EventRecorder
	// broadcaster sends the recorder's events to the API; Run shuts it down.
	broadcaster record.EventBroadcaster
	clients     Clients

	leases     cache.SharedIndexInformer
	slices     cache.SharedIndexInformer
	crds       cache.SharedIndexInformer
	apiservice cache.SharedIndexInformer

	// Owned by the Run goroutine.
	peers           map[string]*peerState
	lastClusterWide map[schema.GroupVersion]string
	// deletedGVs are GVs of deleted CRDs and APIServices, excluded from
	// everything while a peer's document may still list them.
	deletedGVs  map[schema.GroupVersion]bool
	badLeases   map[string]string
	initialized bool

	// eventGate, when set, decides whether an Event is emitted.
	eventGate atomic.Pointer[func() bool]

	trigger chan struct{}
	results chan scrapeResult
	sem     chan struct{}
}

type peerState struct {
	compute.Peer
	// docFromLease: the documents are the departure record's resource
	// list, not a read of the peer.
	docFromLease bool
	inflight     bool
	tried        bool
	// again: the endpoint changed (or a refresh was asked) during a scrape.
	again bool
}

type scrapeResult struct {
	id       string
	endpoint string
	doc      Document
	err      error
	took     time.Duration
}

// New builds an engine. scrape may be nil: then a Scraper is built from
// restConfig and the options.
func New(opts Options, clients Clients, restConfig *rest.Config, publisher registry.Publisher, scrape ScrapeFunc, clk clock.WithTicker) (*Engine, error) {
	registerMetrics()
	if clk == nil {
		clk = clock.RealClock{}
	}
	if scrape == nil {
		caData, err := peerCA(opts.PeerCAFile, restConfig)
		if err != nil {
			return nil, err
		}
		s, err := NewScraper(restConfig, caData, opts.PeerServerName, opts.MaxDiscoveryBytes)
		if err != nil {
			return nil, fmt.Errorf("building the peer client: %w", err)
		}
		scrape = s.Scrape
	}
	e := &Engine{
		opts: opts, clock: clk, scrape: scrape, publisher: publisher, clients: clients,
		peers:           map[string]*peerState{},
		lastClusterWide: map[schema.GroupVersion]string{},
		deletedGVs:      map[schema.GroupVersion]bool{},
		badLeases:       map[string]string{},
		trigger:         make(chan struct{}, 1),
		results:         make(chan scrapeResult, 64),
		sem:             make(chan struct{}, opts.ScrapeConcurrency),
	}
	kubeSystem := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithNamespace(peerlease.Namespace))
	e.leases = kubeSystem.Coordination().V1().Leases().Informer()
	defaults := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=kubernetes" }))
	e.slices = defaults.Discovery().V1().EndpointSlices().Informer()
	e.crds = apiextensionsinformers.NewSharedInformerFactory(clients.APIExtensions, 0).Apiextensions().V1().CustomResourceDefinitions().Informer()
	e.apiservice = aggregatorinformers.NewSharedInformerFactory(clients.Aggregator, 0).Apiregistration().V1().APIServices().Informer()
	for _, inf := range []cache.SharedIndexInformer{e.leases, e.slices, e.crds, e.apiservice} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(interface{}) { e.poke() },
			UpdateFunc: func(old, cur interface{}) { e.poke() },
			DeleteFunc: func(interface{}) { e.poke() },
		}); err != nil {
			return nil, err
		}
	}
	if clients.Kube != nil {
		e.broadcaster = record.NewBroadcaster()
		e.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clients.Kube.CoreV1().Events("")})
		host, _ := os.Hostname()
		e.recorder = e.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "peerdiscovery-apiserver", Host: host})
	}
	return e, nil
}

func peerCA(file string, cfg *rest.Config) ([]byte, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--peer-ca-file: %w", err)
		}
		return data, nil
	}
	if len(cfg.TLSClientConfig.CAData) > 0 {
		return cfg.TLSClientConfig.CAData, nil
	}
	if cfg.TLSClientConfig.CAFile != "" {
		return os.ReadFile(cfg.TLSClientConfig.CAFile)
	}
	return nil, fmt.Errorf("no peer CA: set --peer-ca-file (the kubeconfig has no CA either)")
}

// poke asks the loop to re-read the informers; coalesced.
func (e *Engine) poke() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// Run learns, scrapes and publishes until ctx is done.
func (e *Engine) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("peer-engine")
	if e.broadcaster != nil {
		defer e.broadcaster.Shutdown()
	}
	for _, inf := range []cache.SharedIndexInformer{e.leases, e.slices, e.crds, e.apiservice} {
		go inf.RunWithContext(ctx)
	}
	logger.Info("Waiting for informers (leases, endpointslices, CRDs, APIServices)")
	if !cache.WaitForCacheSync(ctx.Done(), e.leases.HasSynced, e.slices.HasSynced, e.crds.HasSynced, e.apiservice.HasSynced) {
		return ctx.Err()
	}
	logger.Info("Informers synced")
	started := e.clock.Now()
	ticker := e.clock.NewTicker(e.opts.RefreshInterval)
	defer ticker.Stop()
	e.reconcile(ctx, true)
	for {
		// Publish as soon as every peer was tried (at once when there is
		// none), without waiting for another event.
		if !e.initialized {
			e.initialized = e.allTried() || e.clock.Since(started) > 2*e.opts.ScrapeTimeout
		}
		if e.initialized {
			if err := e.publish(ctx); err != nil {
				logger.Error(err, "Computing the view failed; the previous view stays")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			e.reconcile(ctx, true)
		case <-e.trigger:
			e.reconcile(ctx, false)
		case r := <-e.results:
			e.apply(ctx, r)
		}
	}
}

func (e *Engine) allTried() bool {
	for _, p := range e.peers {
		if !p.tried && !p.Left {
			return false
		}
	}
	return true
}

// observed is what the API says about one identity now.
type observed struct {
	endpoint, version string
	sources           map[v1alpha1.PeerSource]bool
	// live: a Lease says the server runs. Otherwise it left at goneAt, a
	// time read from its Leases (departure or lapse), so that every
	// replica, whenever it started, gives it the same tombstone.
	live   bool
	goneAt time.Time
	// departed: its registration Lease records a graceful shutdown; served
	// is the resource list recorded with it (nil when there is none).
	departed bool
	served   []peerlease.ServedResource
	// retiredBy is the newer identity registered at the same endpoint.
	retiredBy string
	// acquired and renewed order the identities claiming one endpoint.
	acquired, renewed time.Time
}

// newer orders identities deterministically from their Leases:
// acquireTime, then renewTime, then ID.
func newer(a *observed, aID string, b *observed, bID string) bool {
	if !a.acquired.Equal(b.acquired) {
		return a.acquired.After(b.acquired)
	}
	if !a.renewed.Equal(b.renewed) {
		return a.renewed.After(b.renewed)
	}
	return aID > bID
}

// observe reads the informer caches into the current membership: every
// identity a Lease names (live or not) and every address of the
// default/kubernetes EndpointSlices no Lease claims.
func (e *Engine) observe(ctx context.Context, now time.Time) map[string]*observed {
	logger := klog.FromContext(ctx)
	type leases struct{ reg, ident *peerlease.Registration }
	byID := map[string]*leases{}
	seenBad := map[string]bool{}
	for _, obj := range e.leases.GetStore().List() {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		var reg peerlease.Registration
		var err error
		isReg := false
		switch {
		case peerlease.IsRegistration(l):
			reg, err = peerlease.ParseRegistration(l)
			isReg = true
		case peerlease.IsIdentity(l):
			if _, has := l.Annotations[peerlease.PeerAdvertiseAddressAnnotation]; !has {
				continue // upstream's gate is off: this lease names no endpoint.
			}
			reg, err = peerlease.ParseIdentity(l, e.opts.IdentityLeaseStaleAfter)
		default:
			continue
		}
		if err != nil {
			key := l.Namespace + "/" + l.Name
			seenBad[key] = true
			if e.badLeases[key] != err.Error() {
				logger.Info("Ignoring a broken peer lease", "lease", key, "err", err)
				e.badLeases[key] = err.Error()
			}
			continue
		}
		ls := byID[reg.ServerID]
		if ls == nil {
			ls = &leases{}
			byID[reg.ServerID] = ls
		}
		if isReg {
			ls.reg = &reg
		} else {
			ls.ident = &reg
		}
	}
	for key := range e.badLeases {
		if !seenBad[key] {
			delete(e.badLeases, key)
		}
	}

	out := map[string]*observed{}
	for id, ls := range byID {
		o := &observed{sources: map[v1alpha1.PeerSource]bool{}}
		// A recorded departure wins over an identity Lease that upstream
		// keeps renewing until the process exits.
		o.departed = ls.reg != nil && ls.reg.Departed()
		for _, x := range []struct {
			r   *peerlease.Registration
			src v1alpha1.PeerSource
		}{{ls.ident, v1alpha1.PeerSourceIdentityLease}, {ls.reg, v1alpha1.PeerSourceRegistrationLease}} {
			if x.r == nil {
				continue
			}
			if x.r.AcquireTime.After(o.acquired) {
				o.acquired = x.r.AcquireTime
			}
			if x.r.RenewTime.After(o.renewed) {
				o.renewed = x.r.RenewTime
			}
			if !o.departed && x.r.Live(now) {
				if !o.live {
					// The first live Lease seen replaces what non-live
					// ones said.
					o.live = true
					clear(o.sources)
				}
			} else if o.live {
				continue
			}
			// A registration Lease's endpoint wins over an identity
			// Lease's (the registration comes last).
			o.endpoint = x.r.Endpoint
			if x.r.BinaryVersion != "" {
				o.version = x.r.BinaryVersion
			}
			o.sources[x.src] = true
			if gone := x.r.GoneAt(); gone.After(o.goneAt) {
				o.goneAt = gone
			}
		}
		if o.departed {
			o.goneAt, o.served = ls.reg.GoneAt(), ls.reg.Served
		}
		if o.live {
			o.goneAt = time.Time{}
		}
		out[id] = o
	}

	// A newer identity at an endpoint retires the older ones there at once:
	// the server restarted under a new ID, so the old one's APIs are not
	// unavailable, they are served (or not) by its successor. A live
	// identity is retired only by a newer live one.
	byEndpoint := map[string][]string{}
	for id, o := range out {
		byEndpoint[o.endpoint] = append(byEndpoint[o.endpoint], id)
	}
	for _, ids := range byEndpoint {
		if len(ids) < 2 {
			continue
		}
		// Live first: a departed or lapsed identity never outranks the one
		// serving there now (a server renamed and renamed back).
		sort.Slice(ids, func(i, j int) bool {
			a, b := out[ids[i]], out[ids[j]]
			if a.live != b.live {
				return a.live
			}
			return newer(a, ids[i], b, ids[j])
		})
		for i, id := range ids {
			o := out[id]
			for _, by := range ids[:i] {
				if out[by].live || !o.live {
					o.retiredBy = by
					break
				}
			}
		}
	}

	claimed := map[string]string{}
	for id, o := range out {
		if o.live && o.retiredBy == "" {
			claimed[o.endpoint] = id
		}
	}
	// An identity that left keeps its address while its tombstone lasts:
	// the EndpointSlice lists a server a little longer than its Lease says
	// it runs (its endpoint is removed later in its shutdown), and that
	// address is the server that left, not a new peer with a tombstone of
	// its own that only this replica would know.
	for id, o := range out {
		if _, taken := claimed[o.endpoint]; !taken && !o.live && o.retiredBy == "" && now.Before(o.goneAt.Add(e.opts.TombstonePeriod)) {
			claimed[o.endpoint] = id
		}
	}
	for _, obj := range e.slices.GetStore().List() {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, ep := range sliceEndpoints(s) {
			if id, ok := claimed[ep]; ok {
				if out[id].live {
					out[id].sources[v1alpha1.PeerSourceEndpointSlice] = true
				}
				continue
			}
			// An address is never a Lease's ID (IDs have no ':'), so an
			// unclaimed one is its own peer.
			o := out[ep]
			if o == nil {
				o = &observed{endpoint: ep, sources: map[v1alpha1.PeerSource]bool{}, live: true}
				out[ep] = o
			}
			o.sources[v1alpha1.PeerSourceEndpointSlice] = true
		}
	}
	return out
}

// sliceEndpoints lists the ready host:port pairs of the https port.
func sliceEndpoints(s *discoveryv1.EndpointSlice) []string {
	var port int32
	for _, p := range s.Ports {
		if p.Port != nil && (p.Name == nil || *p.Name == "https" || *p.Name == "") {
			port = *p.Port
			break
		}
	}
	if port == 0 {
		return nil
	}
	var out []string
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		for _, a := range ep.Addresses {
			ip := net.ParseIP(a)
			if ip == nil {
				continue
			}
			// Canonical, as peerlease.ValidateEndpoint makes lease endpoints.
			out = append(out, net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		}
	}
	return out
}

// clusterWide reads CRDs and APIServices with a service.
func (e *Engine) clusterWide() map[schema.GroupVersion]string {
	out := map[schema.GroupVersion]string{}
	for _, obj := range e.crds.GetStore().List() {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				out[schema.GroupVersion{Group: crd.Spec.Group, Version: v.Name}] = compute.SourceCRD
			}
		}
	}
	for _, obj := range e.apiservice.GetStore().List() {
		as, ok := obj.(*apiregistrationv1.APIService)
		if !ok || as.Spec.Service == nil {
			continue
		}
		out[schema.GroupVersion{Group: as.Spec.Group, Version: as.Spec.Version}] = compute.SourceAPIService
	}
	return out
}

// reconcile updates membership from the informers and starts scrapes: of
// every idle peer when all is true (the periodic refresh), otherwise of new
// peers, moved peers and, when CRDs or APIServices changed, every peer.
func (e *Engine) reconcile(ctx context.Context, all bool) {
	now := e.clock.Now()
	obs := e.observe(ctx, now)

	cw := e.clusterWide()
	changedCW := len(cw) != len(e.lastClusterWide)
	for gv := range e.lastClusterWide {
		if _, still := cw[gv]; !still {
			// Never resurrect a deleted CRD's or APIService's GV from a
			// peer's document that has not caught up yet.
			e.deletedGVs[gv] = true
			changedCW = true
		}
	}
	for gv := range cw {
		delete(e.deletedGVs, gv)
		if _, had := e.lastClusterWide[gv]; !had {
			changedCW = true
		}
	}
	e.lastClusterWide = cw

	for id, o := range obs {
		p := e.peers[id]
		if o.retiredBy != "" {
			if p != nil {
				delete(e.peers, id)
				e.event(p, corev1.EventTypeNormal, ReasonReplaced, "Peer %s retired: %s now registers at %s", id, o.retiredBy, o.endpoint)
			}
			continue
		}
		if !o.live {
			e.leftByLease(p, id, o, now)
			continue
		}
		switch {
		case p == nil:
			p = &peerState{Peer: compute.Peer{ServerID: id, ReadyReason: "Pending", ReadyMessage: "discovery not read yet", ReadyTransition: now}}
			e.peers[id] = p
			e.event(p, corev1.EventTypeNormal, ReasonJoined, "Peer %s joined at %s", id, o.endpoint)
		case p.Left:
			p.Left, p.LeftTime = false, time.Time{}
			p.setReady(false, "Pending", "rejoined; discovery not read yet", now)
			// Read it now, not at the next refresh.
			p.again = true
			e.event(p, corev1.EventTypeNormal, ReasonJoined, "Peer %s rejoined at %s", id, o.endpoint)
		}
		if p.Endpoint != o.endpoint {
			p.Endpoint = o.endpoint
			p.again = true
		}
		if o.version != "" && p.BinaryVersion == "" {
			p.BinaryVersion = o.version
		}
		p.Sources = sortedSources(o.sources)
		// A first read already in flight needs no second one: informer
		// events (the initial list's among them) would otherwise read
		// every new peer twice.
		if all || changedCW || (!p.tried && !p.inflight) || p.again {
			e.startScrape(ctx, p)
		}
	}
	byEndpoint := make(map[string]string, len(obs))
	for id, o := range obs {
		if o.live && o.retiredBy == "" {
			byEndpoint[o.endpoint] = id
		}
	}
	for id, p := range e.peers {
		if _, ok := obs[id]; ok {
			continue
		}
		if other, ok := byEndpoint[p.Endpoint]; ok && id == p.Endpoint && !p.Left {
			// A peer known only by its EndpointSlice address now has a lease
			// at that address: the same server under its real ID, not a
			// server that left.
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonRemoved, "Peer %s is now known as %s", id, other)
			continue
		}
		// Its Lease is gone (deleted by a filter of an earlier version, or
		// collected after its tombstone): the time it left is when this
		// replica noticed, unless a Lease already said.
		if !p.Left {
			p.Left, p.LeftTime = true, now
			p.setReady(false, "Left", "its lease lapsed or was deleted; its APIs answer 503 until the tombstone expires", now)
			e.event(p, corev1.EventTypeWarning, ReasonLeft, "Peer %s left; its APIs stay known as unavailable for %s", id, e.opts.TombstonePeriod)
			continue
		}
		if now.Sub(p.LeftTime) >= e.opts.TombstonePeriod {
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonRemoved, "Peer %s removed: tombstone of %s expired", id, e.opts.TombstonePeriod)
		}
	}
	// A deleted GV stays excluded while any document still lists it, and
	// while any scrape is in flight: one started before the deletion (a CRD
	// created and deleted quickly) may still bring it back.
	if len(e.deletedGVs) > 0 && !e.anyInflight() {
		for gv := range e.deletedGVs {
			if !e.anyDocumentHas(gv) {
				delete(e.deletedGVs, gv)
			}
		}
	}
}

// leftByLease applies what a departed or lapsed Lease says. Everything it
// sets comes from the Lease, so every replica publishes the same peer: the
// time it left, its endpoint, and, when it recorded them at departure, the
// resources its tombstone keeps (a scraped document is replaced by them).
func (e *Engine) leftByLease(p *peerState, id string, o *observed, now time.Time) {
	until := o.goneAt.Add(e.opts.TombstonePeriod)
	if !now.Before(until) {
		if p != nil {
			delete(e.peers, id)
			e.event(p, corev1.EventTypeNormal, ReasonRemoved, "Peer %s removed: tombstone of %s expired", id, e.opts.TombstonePeriod)
		}
		return
	}
	if p == nil {
		// Left before this replica knew it (it started later): the
		// transition is no news, so no Event.
		p = &peerState{Peer: compute.Peer{ServerID: id}}
		e.peers[id] = p
	} else if !p.Left {
		how := "its lease lapsed"
		if o.departed {
			how = "it shut down"
		}
		e.event(p, corev1.EventTypeWarning, ReasonLeft, "Peer %s left (%s at %s); its APIs stay known as unavailable until %s",
			id, how, o.goneAt.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	msg := "its lease lapsed; its APIs answer 503 until the tombstone expires"
	if o.departed {
		msg = "it shut down; its APIs answer 503 until the tombstone expires"
	}
	p.Left, p.LeftTime = true, o.goneAt
	p.Ready, p.ReadyReason, p.ReadyMessage, p.ReadyTransition = false, "Left", msg, o.goneAt
	p.Endpoint = o.endpoint
	if o.version != "" {
		p.BinaryVersion = o.version
	}
	p.Sources = sortedSources(o.sources)
	if o.served != nil && (!p.HasDocument || p.docFromLease) {
		// A replica that never read the peer (it started later) takes the
		// recorded list; one that read it keeps the full document, which
		// merged discovery lists during the tombstone with verbs and kinds
		// (the list has GVRs and scopes only). Replicas agree by
		// replication: only the leader publishes. Kept if the peer comes
		// back under the same ID, until its first read: its APIs answer
		// 503 meanwhile, not 404.
		p.API, p.APIs = servedDocuments(o.served)
		p.HasDocument, p.docFromLease = true, true
		// Nothing this replica alone knows: a replica that never read the
		// peer publishes the same object.
		p.APIETag, p.APIsETag, p.LastSyncTime, p.LastError, p.Stale = "", "", time.Time{}, "", false
	}
}

func sortedSources(set map[v1alpha1.PeerSource]bool) []v1alpha1.PeerSource {
	out := make([]v1alpha1.PeerSource, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// servedDocuments turns a departed server's resource list into the
// documents compute reads: the core group in /api, the rest in /apis, in a
// fixed order. Routing tables need the GVRs and scopes only; merged
// discovery lists them without verbs or kinds.
func servedDocuments(served []peerlease.ServedResource) (api, apis []apidiscoveryv2.APIGroupDiscovery) {
	rs := slices.Clone(served)
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Resource < b.Resource
	})
	var groups []apidiscoveryv2.APIGroupDiscovery
	for _, r := range rs {
		if n := len(groups); n == 0 || groups[n-1].Name != r.Group {
			groups = append(groups, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: r.Group}})
		}
		g := &groups[len(groups)-1]
		if n := len(g.Versions); n == 0 || g.Versions[n-1].Version != r.Version {
			g.Versions = append(g.Versions, apidiscoveryv2.APIVersionDiscovery{Version: r.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
		}
		v := &g.Versions[len(g.Versions)-1]
		v.Resources = append(v.Resources, apidiscoveryv2.APIResourceDiscovery{Resource: r.Resource, Scope: r.Scope})
	}
	if len(groups) > 0 && groups[0].Name == "" {
		return groups[:1], groups[1:]
	}
	return nil, groups
}

func (e *Engine) anyInflight() bool {
	for _, p := range e.peers {
		if p.inflight {
			return true
		}
	}
	return false
}

func (e *Engine) anyDocumentHas(gv schema.GroupVersion) bool {
	for _, p := range e.peers {
		for _, doc := range [][]apidiscoveryv2.APIGroupDiscovery{p.API, p.APIs} {
			for i := range doc {
				if doc[i].Name != gv.Group {
					continue
				}
				for _, v := range doc[i].Versions {
					if v.Version == gv.Version {
						return true
					}
				}
			}
		}
	}
	return false
}

func (p *peerState) setReady(ready bool, reason, msg string, now time.Time) {
	if p.Ready != ready || p.ReadyTransition.IsZero() {
		p.ReadyTransition = now
	}
	p.Ready, p.ReadyReason, p.ReadyMessage = ready, reason, msg
}

func (e *Engine) startScrape(ctx context.Context, p *peerState) {
	if p.Left || p.Endpoint == "" {
		return
	}
	if p.inflight {
		p.again = true
		return
	}
	p.inflight, p.again = true, false
	id, endpoint, apiETag, apisETag := p.ServerID, p.Endpoint, p.APIETag, p.APIsETag
	if !p.HasDocument {
		apiETag, apisETag = "", ""
	}
	go func() {
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-e.sem }()
		sctx, cancel := context.WithTimeout(ctx, e.opts.ScrapeTimeout)
		defer cancel()
		start := e.clock.Now()
		doc, err := e.scrape(sctx, endpoint, apiETag, apisETag)
		select {
		case e.results <- scrapeResult{id: id, endpoint: endpoint, doc: doc, err: err, took: e.clock.Since(start)}:
		case <-ctx.Done():
		}
	}()
}

func (e *Engine) apply(ctx context.Context, r scrapeResult) {
	p := e.peers[r.id]
	if p == nil {
		return
	}
	p.inflight, p.tried = false, true
	now := e.clock.Now()
	wasReady := p.Ready
	switch {
	case p.Left || p.Endpoint != r.endpoint:
		// Stale answer: the peer left or moved while it was read.
	case r.err != nil:
		typ := ErrConnection
		var se *ScrapeError
		if errors.As(r.err, &se) {
			typ = se.Type
		}
		peerproxymetrics.IncPeerDiscoverySyncError(ctx, string(typ))
		scrapeDuration.WithLabelValues("error").Observe(r.took.Seconds())
		msg := r.err.Error()
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		p.LastError, p.Stale = msg, p.HasDocument
		// One event per new failure kind: when the peer stops being ready,
		// when its first read fails, when the cause changes.
		newCause := wasReady || p.ReadyReason != string(typ)
		p.setReady(false, string(typ), msg, now)
		if newCause {
			e.event(p, corev1.EventTypeWarning, ReasonNotReady, "Peer %s not ready: %s", p.ServerID, msg)
		}
	default:
		scrapeDuration.WithLabelValues("success").Observe(r.took.Seconds())
		if !r.doc.NotModified {
			p.API, p.APIs, p.APIETag, p.APIsETag = r.doc.API, r.doc.APIs, r.doc.APIETag, r.doc.APIsETag
			p.HasDocument, p.docFromLease = true, false
		}
		if r.doc.Version != "" {
			p.BinaryVersion = r.doc.Version
		}
		p.LastSyncTime, p.LastError, p.Stale = now, "", false
		p.setReady(true, "DiscoverySynced", "", now)
		if !wasReady {
			e.event(p, corev1.EventTypeNormal, ReasonReady, "Peer %s ready: discovery read from %s", p.ServerID, p.Endpoint)
		}
	}
	if p.again {
		e.startScrape(ctx, p)
	}
}

func (e *Engine) publish(ctx context.Context) error {
	in := compute.Input{ClusterWide: e.lastClusterWide}
	if len(e.deletedGVs) > 0 {
		deleted := e.deletedGVs
		in.Excluded = func(g, v string) bool { return deleted[schema.GroupVersion{Group: g, Version: v}] }
	}
	ready, notReady, left := 0, 0, 0
	for _, p := range e.peers {
		in.Peers = append(in.Peers, p.Peer)
		switch {
		case p.Left:
			left++
		case p.Ready:
			ready++
		default:
			notReady++
		}
	}
	peersGauge.WithLabelValues("ready").Set(float64(ready))
	peersGauge.WithLabelValues("not_ready").Set(float64(notReady))
	peersGauge.WithLabelValues("left").Set(float64(left))
	start := time.Now()
	out, err := compute.Compute(in)
	computeDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	notAll, unavailable := 0, 0
	for i := range out.Routes {
		if !out.Routes[i].Status.ServedByAll {
			notAll++
		}
		if out.Routes[i].Status.ReadyPeers == 0 {
			unavailable++
		}
	}
	routesGauge.WithLabelValues("all").Set(float64(len(out.Routes)))
	routesGauge.WithLabelValues("not_served_by_all").Set(float64(notAll))
	routesGauge.WithLabelValues("unavailable").Set(float64(unavailable))
	return e.publisher.Publish(registry.View{Peers: out.Peers, Discovery: out.Discovery, Routes: out.Routes})
}

// SetEventGate makes the engine emit Events only while emit returns true
// (e.g. only on the leader replica, so that N replicas do not record every
// transition N times); nil emits always. Safe to call while Run runs.
func (e *Engine) SetEventGate(emit func() bool) {
	if emit == nil {
		e.eventGate.Store(nil)
		return
	}
	e.eventGate.Store(&emit)
}

// peersResource is the resource APIServerPeer objects are stored under;
// their UID derives from it and the name (the same on every replica).
var peersResource = v1alpha1.Resource("apiserverpeers")

func (e *Engine) event(p *peerState, typ, reason, format string, args ...interface{}) {
	if e.recorder == nil {
		return
	}
	if gate := e.eventGate.Load(); gate != nil && !(*gate)() {
		return
	}
	// kubectl describe finds Events by involvedObject kind, name, namespace
	// (empty: the object is cluster-scoped) and UID, so the reference
	// carries the UID the store gives the object.
	name := compute.PeerName(p.ServerID)
	ref := &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "APIServerPeer",
		Name: name, UID: memstore.UID(peersResource, name),
	}
	e.recorder.Eventf(ref, typ, reason, format, args...)
}
