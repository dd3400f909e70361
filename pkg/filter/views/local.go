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
	"strings"
	"sync/atomic"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/clusterwide"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
	"sigs.k8s.io/peerdiscovery/pkg/nopeer"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// maxLocalDiscoveryBytes bounds what is read from our own server.
const maxLocalDiscoveryBytes = 64 << 20

// LocalDoc is this server's own /api and /apis, as last read.
type LocalDoc struct {
	API, APIs         []apidiscoveryv2.APIGroupDiscovery
	APIETag, APIsETag string
	// Served is what the documents list: a doc is the routing snapshot's
	// Local.
	*routing.Served
	// Generation counts the documents read: each new one is the last
	// one's plus one.
	Generation uint64
}

// Local caches this server's own (profile=nopeer) discovery, read
// over loopback: at start, periodically (ETag makes it a 304), at once when
// a CRD or APIService changes, so a newly served API is served locally
// within a second, and at once when the server's discovery manager tells
// that /apis changed (DiscoveryChanged).
type Local struct {
	doc     atomic.Pointer[LocalDoc]
	refresh chan struct{}
	// changed asks for one read: the server's discovery changed.
	changed chan struct{}
	// crds and apiServices hold the CustomResourceDefinitions' metadata
	// and the APIServices' identity and spec.service (nil until started):
	// what they serve cluster-wide (pkg/clusterwide) is left out of the
	// served record.
	crds, apiServices metadataCache
	// metadataChanges counts their events: the record depends on their
	// metadata, which can change while the document does not.
	metadataChanges atomic.Uint64
	// viewRegistered is true while peerdiscovery's APIService exists:
	// the routing view is expected (routing.Snapshot.ViewRegistered).
	viewRegistered atomic.Bool
	// record caches the served record of one document.
	record atomic.Pointer[servedRecord]
	// clock times the reads; tests set a fake one.
	clock clock.WithTickerAndDelayedExecution
	// onChange, when set, is called after each new document (the routing
	// snapshot is published from it).
	onChange func()
}

// metadataCache is the part of an informer the served record reads.
type metadataCache interface {
	HasSynced() bool
	GetStore() cache.Store
}

func newLocal() *Local {
	return &Local{refresh: make(chan struct{}, 1), changed: make(chan struct{}, 1), clock: clock.RealClock{}}
}

// Serves tells whether this server serves gvr, as last read; it does not
// allocate.
func (l *Local) Serves(gvr schema.GroupVersionResource) bool {
	d := l.doc.Load()
	return d != nil && d.Serves(gvr)
}

// metadataChanged follows a CRD or APIService event: the served record is
// encoded again, and the document read again (what a CRD or APIService
// serves shows in the local discovery within moments).
func (l *Local) metadataChanged() {
	l.metadataChanges.Add(1)
	l.poke()
}

// viewAPIService is the name of the APIService that serves the view.
var viewAPIService = clusterwide.APIServiceName(v1alpha1.SchemeGroupVersion)

// apiServiceEvent follows the APIService informer for viewAPIService.
func (l *Local) apiServiceEvent(obj any, exists bool) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil && key == viewAPIService {
		l.SetViewRegistered(exists)
	}
}

// SetViewRegistered records whether peerdiscovery's APIService exists and
// tells onChange when that changed.
func (l *Local) SetViewRegistered(registered bool) {
	if l.viewRegistered.Swap(registered) != registered && l.onChange != nil {
		l.onChange()
	}
}

// ViewRegistered tells whether peerdiscovery's APIService exists.
func (l *Local) ViewRegistered() bool { return l.viewRegistered.Load() }

func (l *Local) Synced() bool       { return l.doc.Load() != nil }
func (l *Local) Current() *LocalDoc { return l.doc.Load() }

// SetDoc installs a new document and tells onChange.
func (l *Local) SetDoc(d *LocalDoc) {
	l.doc.Store(d)
	if l.onChange != nil {
		l.onChange()
	}
}

// DiscoveryChanged asks for a read: the server's own discovery changed
// (pkg/filter/discoverychanges). It does not block; changes while a read
// is owed are read by that read.
func (l *Local) DiscoveryChanged() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *Local) poke() {
	select {
	case l.refresh <- struct{}{}:
	default:
	}
}

func (l *Local) Start(ctx context.Context, loopback *rest.Config, interval time.Duration) error {
	httpClient, err := rest.HTTPClientFor(loopback)
	if err != nil {
		return err
	}
	client := nopeer.NewClient(httpClient, maxLocalDiscoveryBytes)
	meta, err := metadata.NewForConfig(loopback)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	factory := metadatainformer.NewSharedInformerFactoryWithOptions(meta, 0, metadatainformer.WithTransform(keepIdentity))
	crdsGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServicesGVR := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	crds := factory.ForResource(crdsGVR).Informer()
	// APIServices are read whole, for spec.service (pkg/clusterwide): small
	// objects, no schema; the transform keeps what the rule reads.
	apiServices := dynamicinformer.NewFilteredDynamicInformer(dyn, apiServicesGVR, "", 0, cache.Indexers{}, nil).Informer()
	if err := apiServices.SetTransform(keepAPIServiceIdentity); err != nil {
		return err
	}
	for _, inf := range []cache.SharedIndexInformer{crds, apiServices} {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(interface{}) { l.metadataChanged() },
			UpdateFunc: func(interface{}, interface{}) { l.metadataChanged() },
			DeleteFunc: func(interface{}) { l.metadataChanged() },
		})
	}
	_, _ = apiServices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { l.apiServiceEvent(o, true) },
		UpdateFunc: func(_, o interface{}) { l.apiServiceEvent(o, true) },
		DeleteFunc: func(o interface{}) { l.apiServiceEvent(o, false) },
	})
	l.crds, l.apiServices = crds, apiServices
	factory.Start(ctx.Done())
	go apiServices.RunWithContext(ctx)
	base := loopback.Host
	if !strings.Contains(base, "://") {
		base = "https://" + base
	}
	// The first read is made before the post-start hook returns, so a ready
	// server knows what it serves itself (the filter's 503-or-local choice
	// while unsynced depends on it); bounded, so startup never waits long.
	firstCtx, cancel := context.WithTimeout(ctx, localFirstReadTimeout)
	defer cancel()
	// The CRDs and APIServices first, within the same bound: the first
	// registration renewal then records the list without theirs.
	cache.WaitForCacheSync(firstCtx.Done(), crds.HasSynced, apiServices.HasSynced)
	if err := l.read(firstCtx, client, base); err != nil {
		logReadError(klog.FromContext(ctx), "peerdiscovery filter: first read of local discovery failed; will retry", err)
		l.poke()
	}
	go l.loop(ctx, client, base, interval)
	return nil
}

// keepIdentity is the CRD informer's transform: CRDs are read only for
// their names and for change events, so the stored copy keeps that and
// drops the rest. A CRD's managedFields (and a kubectl-applied one's
// last-applied annotation) are about the size of its schema; the
// server's own apiextensions informer already holds all that, and a second
// copy in the filter grew with every CRD.
func keepIdentity(obj interface{}) (interface{}, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              m.Name,
			Namespace:         m.Namespace,
			UID:               m.UID,
			ResourceVersion:   m.ResourceVersion,
			Generation:        m.Generation,
			DeletionTimestamp: m.DeletionTimestamp,
		},
	}, nil
}

// keepAPIServiceIdentity is the APIService informer's transform: the
// identity, spec.group and spec.version, and whether spec.service is set
// (not its CA bundle), which is all clusterwide.APIService reads.
func keepAPIServiceIdentity(obj interface{}) (interface{}, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	meta := map[string]interface{}{}
	md, _ := u.Object["metadata"].(map[string]interface{})
	for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp"} {
		if v, ok := md[k]; ok {
			meta[k] = v
		}
	}
	spec := map[string]interface{}{}
	for _, k := range []string{"group", "version"} {
		if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", k); ok {
			spec[k] = v
		}
	}
	if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "service"); ok && v != nil {
		spec["service"] = map[string]interface{}{}
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": meta, "spec": spec,
	}}, nil
}

const (
	// localFirstReadTimeout bounds the post-start hook's first read.
	localFirstReadTimeout = 5 * time.Second
	// localRereadDelay is when a change event's second read follows, and
	// the least time between two reads that events cause.
	localRereadDelay = time.Second
	// localReadTimeout bounds one read of /api and /apis.
	localReadTimeout = 10 * time.Second
)

// localEventRereads are the reads a change event owes after its first, each
// delay from the read before: the server's discovery follows a CRD or
// APIService within moments, mostly within the first delay, and the last
// catches a discovery controller that is slow under load. What no watch
// shows (an aggregated API's resources under an unchanged APIService,
// which kube-aggregator reads again each minute) the server's discovery
// manager tells (DiscoveryChanged); the periodic read
// (Options.LocalRefreshInterval) is for a server whose manager cannot tell.
// Reads are not free: each, even one answered 304, makes the server
// marshal its whole /apis once its aggregated discovery cache was
// invalidated, and kube-aggregator invalidates it every time it resyncs
// an APIService (every minute each), so a read every 5 s was about a
// quarter MiB/s of allocations per server at 5,000 GVRs (the bench's
// allocation profiles: resourceDiscoveryManager.fetchFromCache).
var localEventRereads = []time.Duration{localRereadDelay, 4 * time.Second}

func (l *Local) loop(ctx context.Context, client *nopeer.Client, base string, interval time.Duration) {
	logger := klog.FromContext(ctx)
	t := l.clock.NewTicker(interval)
	defer t.Stop()
	// A change event owes a read at once and localEventRereads after it.
	// Event-driven reads are at least localRereadDelay apart: during a
	// burst (a thousand CRDs applied) each read, a marshal and decode of
	// the whole /apis on both sides, would otherwise follow the last back
	// to back; each event restarts the schedule, so the burst's last event
	// is read within two delays.
	var (
		owed     int
		next     = l.clock.NewTimer(time.Hour)
		nextC    <-chan time.Time
		lastRead time.Time
	)
	next.Stop()
	defer next.Stop()
	arm := func(d time.Duration) {
		next.Reset(d)
		nextC = next.C()
	}
	for {
		tick, event := false, false
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			tick = true // a pending re-read stays as it is
		case <-nextC:
			nextC = nil
			owed--
		case <-l.refresh:
			owed, event = 1+len(localEventRereads), true
		case <-l.changed:
			// The change is in the server's discovery already: one
			// read, no re-reads.
			owed, event = max(owed, 1), true
		}
		if event {
			if wait := localRereadDelay - l.clock.Since(lastRead); wait > 0 {
				// Also when a later re-read was due: this event's first
				// read comes first.
				arm(wait)
				continue
			}
			owed--
		}
		lastRead = l.clock.Now()
		if err := l.read(ctx, client, base); err != nil && ctx.Err() == nil {
			logReadError(logger, "peerdiscovery filter: reading local discovery failed; the last good document stays; will retry", err)
		}
		if owed > 0 && !tick {
			arm(localEventRereads[len(localEventRereads)-owed])
		}
	}
}

// logReadError logs a failed read: at once when the server's document
// itself is bad (it will not fix itself by a retry), at V(2) when the read
// failed on the way (the server is starting, a timeout).
func logReadError(logger klog.Logger, msg string, err error) {
	switch nopeer.TypeOf(err) {
	case nopeer.ErrInvalid, nopeer.ErrDecode, nopeer.ErrMediaType, nopeer.ErrOversized:
		logger.Error(err, msg)
	default:
		logger.V(2).Info(msg, "err", err)
	}
}

// read reads this server's /api and /apis (each validated by
// discoveryclient) and installs them only when both are good: on any error
// the last good document stays.
func (l *Local) read(ctx context.Context, client *nopeer.Client, base string) error {
	ctx, cancel := context.WithTimeout(ctx, localReadTimeout)
	defer cancel()
	prev := l.doc.Load()
	var last *nopeer.Documents
	if prev != nil {
		last = &nopeer.Documents{API: prev.API, APIs: prev.APIs, APIETag: prev.APIETag, APIsETag: prev.APIsETag}
	}
	docs, notModified, err := client.ReadDocuments(ctx, base, last)
	if err != nil || notModified {
		return err
	}
	l.SetDoc(NewLocalDoc(prev, docs.API, docs.APIs, docs.APIETag, docs.APIsETag))
	return nil
}

// NewLocalDoc indexes the served GVRs of api and apis; its generation
// follows prev's.
func NewLocalDoc(prev *LocalDoc, api, apis []apidiscoveryv2.APIGroupDiscovery, apiETag, apisETag string) *LocalDoc {
	var gvrs []schema.GroupVersionResource
	for gvr := range merge.Resources(api, apis) {
		gvrs = append(gvrs, gvr)
	}
	d := &LocalDoc{API: api, APIs: apis, APIETag: apiETag, APIsETag: apisETag, Served: routing.NewServed(gvrs)}
	if prev != nil {
		d.Generation = prev.Generation + 1
	}
	return d
}
