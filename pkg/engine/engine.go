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
	"sort"
	"strconv"
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
	registry "sigs.k8s.io/peerdiscovery/pkg/registry/peerdiscovery"
)

// Event reasons, one per peer transition.
const (
	ReasonJoined   = "PeerJoined"
	ReasonReady    = "PeerReady"
	ReasonNotReady = "PeerNotReady"
	ReasonLeft     = "PeerLeft"
	ReasonRemoved  = "PeerTombstoneExpired"
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

	trigger chan struct{}
	results chan scrapeResult
	sem     chan struct{}
}

type peerState struct {
	compute.Peer
	inflight bool
	tried    bool
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

type observed struct {
	endpoint, version string
	sources           map[v1alpha1.PeerSource]bool
}

// observe reads the informer caches into the current membership.
func (e *Engine) observe(ctx context.Context, now time.Time) map[string]*observed {
	logger := klog.FromContext(ctx)
	out := map[string]*observed{}
	add := func(id, endpoint, version string, src v1alpha1.PeerSource) {
		o := out[id]
		if o == nil {
			o = &observed{sources: map[v1alpha1.PeerSource]bool{}}
			out[id] = o
		}
		// A registration Lease's endpoint wins over an identity Lease's.
		if o.endpoint == "" || src == v1alpha1.PeerSourceRegistrationLease {
			o.endpoint = endpoint
		}
		if version != "" {
			o.version = version
		}
		o.sources[src] = true
	}
	seenBad := map[string]bool{}
	for _, obj := range e.leases.GetStore().List() {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		var reg peerlease.Registration
		var err error
		var src v1alpha1.PeerSource
		switch {
		case peerlease.IsRegistration(l):
			reg, err = peerlease.ParseRegistration(l)
			src = v1alpha1.PeerSourceRegistrationLease
		case peerlease.IsIdentity(l):
			if _, has := l.Annotations[peerlease.PeerAdvertiseAddressAnnotation]; !has {
				continue // upstream's gate is off: this lease names no endpoint.
			}
			reg, err = peerlease.ParseIdentity(l, e.opts.IdentityLeaseStaleAfter)
			src = v1alpha1.PeerSourceIdentityLease
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
		if now.After(reg.Expires) {
			continue
		}
		add(reg.ServerID, reg.Endpoint, reg.BinaryVersion, src)
	}
	for key := range e.badLeases {
		if !seenBad[key] {
			delete(e.badLeases, key)
		}
	}
	byEndpoint := map[string]string{}
	for id, o := range out {
		byEndpoint[o.endpoint] = id
	}
	for _, obj := range e.slices.GetStore().List() {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, ep := range sliceEndpoints(s) {
			if id, ok := byEndpoint[ep]; ok {
				out[id].sources[v1alpha1.PeerSourceEndpointSlice] = true
				continue
			}
			add(ep, ep, "", v1alpha1.PeerSourceEndpointSlice)
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
		p.Sources = p.Sources[:0]
		for s := range o.sources {
			p.Sources = append(p.Sources, s)
		}
		sort.Slice(p.Sources, func(i, j int) bool { return p.Sources[i] < p.Sources[j] })
		// A first read already in flight needs no second one: informer
		// events (the initial list's among them) would otherwise read
		// every new peer twice.
		if all || changedCW || (!p.tried && !p.inflight) || p.again {
			e.startScrape(ctx, p)
		}
	}
	byEndpoint := make(map[string]string, len(obs))
	for id, o := range obs {
		byEndpoint[o.endpoint] = id
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
			p.HasDocument = true
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

func (e *Engine) event(p *peerState, typ, reason, format string, args ...interface{}) {
	if e.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "APIServerPeer",
		Name: compute.PeerName(p.ServerID),
	}
	e.recorder.Eventf(ref, typ, reason, format, args...)
}
