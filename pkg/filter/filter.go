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

// Package filter is the peerdiscovery request filter that runs inside every
// kube-apiserver, innermost in the aggregator chain (after authentication,
// audit, impersonation, APF and authorization), exactly where upstream wraps
// its peer proxy. It routes each request its server cannot serve to a peer
// that can, using the routing state served by peerdiscovery-apiserver, and
// serves the peer-aggregated /apis.
//
// The files and packages, by job:
//
//   - filter.go: New, the hooks, and the handler: the routing decision
//     (pkg/routing) for each request and where it goes; options.go: what
//     the filter takes from kube-apiserver's flags; readiness.go: the
//     readyz check; registration.go: this server's registration Lease
//     (what it serves, its departure) and the collection of old ones.
//   - package views: what the filter knows (the peerdiscovery.k8s.io
//     objects and the routing table built from them, the registration
//     Leases from this server's own watch cache, this server's own
//     discovery) and the routing.Snapshot published from them.
//   - package discovery: discovery and OpenAPI for the whole cluster.
//   - package proxy: sending a request to a peer (candidates, failover,
//     connection pools, a peer's answer, ending the attempts to a peer
//     that stopped answering).
//   - package status: the Status answers the filter writes itself (503
//     with or without Retry-After, 502, 504) and the audit annotations.
//   - package metrics: metrics (upstream's names kept).
//
// A proxied request: the handler loads the views' current snapshot (one
// pointer), routing.Decide picks the candidates, and proxy.Serve tries
// them, loading the snapshot again before each attempt and asking
// routing.StillCandidate when it is a newer one or the attempt is not the
// first (a candidate that stopped since the decision is skipped). A
// discovery request goes to discovery.Server.Serve, which reads the same
// views.
//
// It must compile against the k8s.io libraries of every release the
// project builds (hack/verify-filter-builds.sh checks), so it imports no
// generated clientset or informers: it reads the peerdiscovery.k8s.io
// types through a plain REST client (see docs/design.md).
package filter

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/discovery"
	"sigs.k8s.io/peerdiscovery/pkg/filter/discoverychanges"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
	"sigs.k8s.io/peerdiscovery/pkg/filter/status"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// PeerProxiedHeader marks a request a peer already proxied (upstream's name).
const PeerProxiedHeader = proxy.PeerProxiedHeader

// Audit annotations on the source server's event (status names them).
const (
	AuditDecision    = status.AuditDecision
	AuditProxiedTo   = status.AuditProxiedTo
	AuditFailedOver  = status.AuditFailedOver
	AuditError       = status.AuditError
	AuditRouteSource = status.AuditRouteSource
)

// Filter is one kube-apiserver's peer routing filter.
type Filter struct {
	opts     Options
	endpoint string

	// Set by WrapHandler from the aggregator's generic config.
	serverID      string
	binaryVersion string
	answers       status.Answers
	longRunning   apirequest.LongRunningRequestCheck
	// clock is the real clock; tests set a fake one.
	clock clock.WithTickerAndDelayedExecution

	proxy *proxy.Proxier
	// views is what the filter knows (the routes, the registration
	// Leases, its own discovery) and the routing.Snapshot every decision
	// reads; the sync grace's end (when the post-start hook ran plus
	// SyncGracePeriod) is kept there.
	views     *views.Views
	discovery *discovery.Server
	// snapshot is where the views publish the routing snapshot: the
	// handler and the proxy load it (one pointer) on each request.
	snapshot *atomic.Pointer[routing.Snapshot]

	started atomic.Bool
	// discoveryFollowed is set when WrapDiscoveryManager wrapped the
	// server's discovery manager, which then tells each change.
	discoveryFollowed atomic.Bool
	// registrar keeps the registration Lease; set by the post-start hook.
	registrar atomic.Pointer[registrar]
	// routableLatched is set once ReadyzCheck passed; routableSince is
	// when it first found peers able to route here (nil: they cannot now).
	routableLatched atomic.Bool
	routableSince   atomic.Pointer[time.Time]
}

// New validates the options and builds a filter. A filter whose options
// enable nothing (no --peer-ca-file) passes every request through.
func New(opts Options) (*Filter, error) {
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("peerdiscovery filter: %v", errs)
	}
	if opts.PeerServerName == "" {
		opts.PeerServerName = nopeer.DefaultPeerServerName
	}
	if opts.RetryAfterSeconds == 0 {
		// As the watch cache while it initializes: client-go's 10
		// retries then wait 10 s at most, not 50.
		opts.RetryAfterSeconds = 1
	}
	if opts.SyncGracePeriod == 0 {
		opts.SyncGracePeriod = time.Minute
	}
	if opts.PeerResponseHeaderTimeout == 0 {
		opts.PeerResponseHeaderTimeout = 45 * time.Second
	}
	if opts.RegistrationLeaseRetention == 0 {
		opts.RegistrationLeaseRetention = DefaultRegistrationLeaseRetention
	}
	if opts.RegistrationLeaseMaxRetention == 0 {
		opts.RegistrationLeaseMaxRetention = DefaultRegistrationLeaseMaxRetention
	}
	if opts.RegistrationLeaseGCInterval == 0 {
		opts.RegistrationLeaseGCInterval = DefaultRegistrationLeaseGCInterval
	}
	if opts.PeerHTTP2 == nil {
		h2 := DefaultPeerHTTP2
		opts.PeerHTTP2 = &h2
	}
	metrics.Register()
	f := &Filter{opts: opts, clock: clock.RealClock{}}
	f.views = views.New(views.Config{Now: f.now, OnPeerStopped: f.peerStopped})
	f.snapshot = f.views.Published()
	if !opts.Enabled() {
		metrics.SetEnabled(false)
		// No context reaches New: the process's logger.
		klog.Background().Info("peerdiscovery filter disabled: --peer-ca-file is not set; requests for resources this kube-apiserver does not serve get its own answer (404)")
		return f, nil
	}
	metrics.SetEnabled(true)
	ep, err := opts.endpoint()
	if err != nil {
		return nil, err
	}
	f.endpoint = ep
	f.proxy, err = proxy.New(proxy.Config{
		CAFile: opts.PeerCAFile, ClientCertFile: opts.ProxyClientCertFile, ClientKeyFile: opts.ProxyClientKeyFile,
		ServerName: opts.PeerServerName, HeaderTimeout: opts.PeerResponseHeaderTimeout, HTTP2: *opts.PeerHTTP2,
		Snapshot: f.snapshot, Clock: f.clock,
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Local discovery's periodic read (Options.LocalRefreshInterval) when the
// server's discovery manager tells each change (WrapDiscoveryManager) and
// when it does not.
const (
	followedLocalRefreshInterval = 10 * time.Minute
	polledLocalRefreshInterval   = time.Minute
)

// WrapDiscoveryManager returns the server's discovery manager (the generic
// configs' AggregatedDiscoveryGroupManager, one for the whole server)
// wrapped so that each change of what /apis serves makes the filter read
// its own discovery at once. Without it the filter finds a change that no
// watch shows (an aggregated API's resources under an unchanged
// APIService) only by its periodic read, once a minute. Every user of the
// manager must be given the wrapper. A disabled filter returns rm as is.
func (f *Filter) WrapDiscoveryManager(rm aggregated.ResourceManager) aggregated.ResourceManager {
	if !f.opts.Enabled() {
		return rm
	}
	wrapped, ok := discoverychanges.Wrap(rm, f.views.Local.DiscoveryChanged)
	if ok {
		f.discoveryFollowed.Store(true)
	}
	return wrapped
}

// localRefreshInterval is the periodic read of the server's own discovery:
// a safety poll when its discovery manager tells each change, else the
// only way to find an aggregated API's changes (kube-aggregator reads them
// each minute). Each read of a changed /apis is a rebuild of it on the
// server (views.localEventRereads).
func (f *Filter) localRefreshInterval() time.Duration {
	switch {
	case f.opts.LocalRefreshInterval > 0:
		return f.opts.LocalRefreshInterval
	case f.discoveryFollowed.Load():
		return followedLocalRefreshInterval
	default:
		return polledLocalRefreshInterval
	}
}

// now reads the filter's clock, which tests replace after New.
func (f *Filter) now() time.Time { return f.clock.Now() }

// departureNoticeGrace is how long a peer that the view stopped while its
// registration Lease still looks live here is given for this server's own
// Lease watch to show a departure, before its requests in flight are
// ended. The view comes through an extension replica, the Lease straight
// from this server's watch cache, so the Lease nearly always arrives
// first; the grace covers the rest.
const departureNoticeGrace = 2 * time.Second

// peerStopped is called when the view no longer marks a peer ready. A
// peer that stopped answering (frozen, cut off, crashed: its Lease lapsed)
// has its requests in flight ended at once instead of waiting for a
// timeout. A peer that departed gracefully has not stopped answering: it
// finishes its requests in flight during its own shutdown, so they run to
// completion (ending them failed writes the leaving server would have
// completed: a 504 in the upgrade drill at the SIGTERM of a rolling
// upgrade). Its new requests go elsewhere all the same: it is not ready.
func (f *Filter) peerStopped(id string) {
	switch f.views.Leases.State(id) {
	case views.LeaseDeparted:
		return
	case views.LeaseLive:
		f.clock.AfterFunc(departureNoticeGrace, func() {
			if f.views.Leases.State(id) != views.LeaseDeparted && !f.views.Routes.PeerReady(id) {
				f.proxy.StopPeer(id)
			}
		})
	default:
		f.proxy.StopPeer(id)
	}
}

// WrapHandler wraps the innermost handler of the aggregator chain. c is the
// aggregator's generic config: it names this server (APIServerID) and gives
// the serializer for error responses.
func (f *Filter) WrapHandler(h http.Handler, c *genericapiserver.Config) http.Handler {
	if !f.opts.Enabled() {
		return h
	}
	f.serverID = c.APIServerID
	f.views.SetSelf(c.APIServerID)
	f.binaryVersion = version.Get().GitVersion
	f.answers = status.Answers{Serializer: c.Serializer, RetryAfter: f.opts.RetryAfterSeconds}
	f.proxy.Answers = f.answers
	f.proxy.UseEgressSelector(c.EgressSelector)
	f.longRunning = c.LongRunningFunc
	if f.longRunning == nil {
		f.longRunning = defaultLongRunning
	}
	f.discovery = discovery.New(discovery.Config{Views: f.views, Proxy: f.proxy, Answers: f.answers, Self: f.serverID, Now: f.now, Starting: f.starting})
	return &handler{f: f, next: h}
}

// defaultLongRunning is kube-apiserver's own check (upstream's
// controlplane/apiserver.BuildGenericConfig sets it), for a generic config
// that has none.
var defaultLongRunning = genericfilters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"),
)

// PostStartHook starts the caches, the registration Lease and the
// certificate reloaders. It never blocks startup: without
// peerdiscovery-apiserver the server serves everything locally.
func (f *Filter) PostStartHook(hookCtx genericapiserver.PostStartHookContext) error {
	if !f.opts.Enabled() {
		return nil
	}
	if !f.started.CompareAndSwap(false, true) {
		return nil
	}
	logger := klog.FromContext(hookCtx)
	deadline := f.clock.Now().Add(f.opts.SyncGracePeriod)
	f.setSyncDeadline(&deadline)
	ctx := context.Context(hookCtx)
	loopback := rest.CopyConfig(hookCtx.LoopbackClientConfig)
	f.proxy.Run(ctx)
	if err := f.views.Start(ctx, loopback, f.localRefreshInterval()); err != nil {
		return err
	}
	r, err := startRegistration(ctx, loopback, f.serverID, f.endpoint, f.binaryVersion, f.views.Local.ServedRecord, f.views.Routes.ListsPeer, f.opts, f.clock)
	if err != nil {
		return err
	}
	f.registrar.Store(r)
	logger.Info("peerdiscovery filter started", "serverID", f.serverID, "endpoint", f.endpoint)
	return nil
}

// PreShutdownHook records this server's departure in its registration
// Lease. It must run as a pre-shutdown hook: those run at SIGTERM while the
// server still accepts requests (it stops once they are done), so the
// write over the loopback client succeeds even without a shutdown delay;
// the post-start hook's context ends only when the listener is closed.
func (f *Filter) PreShutdownHook() error {
	r := f.registrar.Load()
	if r == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), departTimeout)
	defer cancel()
	if err := r.depart(ctx); err != nil {
		// Never fail the shutdown: the Lease lapses by itself. No context
		// reaches a pre-shutdown hook: the process's logger.
		klog.Background().Info("peerdiscovery filter: recording the departure in the registration lease failed; it lapses by itself", "err", err)
	}
	return nil
}

// Synced reports whether both the local discovery and the routing caches
// are filled, i.e. whether the filter routes.
func (f *Filter) Synced() bool { return f.views.Synced() }

// setSyncDeadline records when the sync grace ends (nil: not started).
func (f *Filter) setSyncDeadline(d *time.Time) { f.views.SetSyncDeadline(d) }

// handler is the wrapped chain.
type handler struct {
	f    *Filter
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := h.f
	info, ok := apirequest.RequestInfoFrom(r.Context())
	if !ok {
		h.next.ServeHTTP(w, r)
		return
	}
	if !info.IsResourceRequest {
		if f.discovery.Serve(w, r, h.next) {
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	req := routing.Request{
		IsResourceRequest: true,
		GVR:               schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource},
		AlreadyProxied:    r.Header.Get(PeerProxiedHeader) == "true",
	}
	snap := f.snapshot.Load()
	res := routing.Decide(snap, req, f.clock.Now())
	switch res.Decision {
	case v1alpha1.RouteProxy:
		if res.ByLease {
			audit.AddAuditAnnotation(r.Context(), AuditRouteSource, "registration-lease")
		}
		f.proxy.Serve(w, r, proxy.Target{Candidates: res.Candidates, GVR: res.GVR, About: status.ResourceSubject(res.GVR), LongRunning: f.longRunning(r, info), Decided: snap})
	case v1alpha1.RouteUnavailable:
		if res.Unsynced() {
			// The GVR comes from the client and is known to no routing
			// state yet: it must not become a metric label.
			metrics.ProxyError(r.Context(), metrics.ErrorUnsynced, metrics.UnknownLabels)
			metrics.RoutedAnswer(http.StatusServiceUnavailable)
			audit.AddAuditAnnotation(r.Context(), AuditDecision, "unsynced")
			f.answers.RetryLater(w, r, status.ResourceSubject(req.GVR), res.Reason())
			return
		}
		audit.AddAuditAnnotation(r.Context(), AuditDecision, string(v1alpha1.RouteUnavailable))
		if res.RetryAfter {
			f.answers.Unavailable(w, r, status.ResourceSubject(req.GVR), res.Reason())
		} else {
			f.answers.NoneReady(w, r, status.ResourceSubject(req.GVR), res.Reason())
		}
	default:
		h.next.ServeHTTP(w, r)
	}
}

// starting is true before the post-start hook has run and for
// unsyncedReadyAfter after it: while an unsynced filter holds this server's
// readiness (ReadyzCheck), a discovery document is a 503 rather than the
// local chain's alone. Past it the server is ready, and a cluster without
// a reachable peerdiscovery-apiserver (the bootstrap of one, too) is
// served as stock kube-apiserver serves it.
func (f *Filter) starting() bool {
	deadline := f.views.SyncDeadline()
	if !f.started.Load() || deadline == nil {
		return true
	}
	now := f.clock.Now()
	hookRan := deadline.Add(-f.opts.SyncGracePeriod)
	return now.Sub(hookRan) < unsyncedReadyAfter && now.Before(*deadline)
}
