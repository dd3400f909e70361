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

// Package discovery serves discovery and OpenAPI for the whole cluster
// from the filter's views: discovery.go: the dispatcher (Serve) and the
// aggregated /api and /apis; legacy.go: the legacy forms; openapi.go:
// OpenAPI v3, whose documents come from the peer serving most of a
// group-version.
package discovery

import (
	"net/http"
	"strings"
	"sync"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
	"sigs.k8s.io/peerdiscovery/pkg/filter/status"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Serve answers the discovery and OpenAPI requests whose true
// answer is the cluster's, not only this server's. It returns false to let
// the chain answer: a method other than GET, a request a peer proxied here
// or that asks for this server's own view (X-Kubernetes-Peer-Proxied:
// true), routing caches not synced yet (once the server is ready; before,
// a discovery document is a 503), and anything this server answers the
// same as the cluster.
func (d *Server) Serve(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	if r.Method != http.MethodGet || r.Header.Get(proxy.PeerProxiedHeader) == "true" {
		return false
	}
	path := r.URL.Path
	if !d.views.Synced() {
		// profile=nopeer asks for this server's own document
		// (peerdiscovery-apiserver's scrape): the chain's, always.
		nopeer := strings.Contains(r.Header.Get("Accept"), "profile=nopeer")
		if d.starting() && IsDiscoveryPath(path) && !nopeer {
			// A starting server's own document lacks every peer's group
			// and, until apiextensions' DiscoveryController has run, its
			// CRDs; a client acting on it gets no error (the namespace
			// controller finalizes a namespace once every resource it
			// listed is empty). 503 until synced, as for resources.
			metrics.DiscoveryServed(discoveryEndpoint(r), metrics.SourceUnavailable)
			audit.AddAuditAnnotation(r.Context(), status.AuditDecision, "unsynced")
			d.answers.RetryLater(w, r, status.DiscoverySubject, "this kube-apiserver's peer-aggregated discovery is not synced yet")
			return true
		}
		// Past the start the chain answers, as stock kube-apiserver; but
		// a group or group-version this server does not serve and a live
		// peer's Lease records is no 404, as for its resources, and a root
		// document that lacks it is no answer (routing.DecideRoot).
		if (path == "/api" || path == "/apis") && !nopeer && d.views.Local.Synced() {
			if res := routing.DecideRoot(d.views.Snapshot(), path == "/api", d.now()); res.Decision == v1alpha1.RouteUnavailable {
				metrics.DiscoveryServed(discoveryEndpoint(r), metrics.SourceUnavailable)
				d.unrouted(w, r, status.DiscoverySubject, res)
				return true
			}
			metrics.DiscoveryServed(discoveryEndpoint(r), metrics.SourceLocal)
			return false
		}
		if p, ok := parseDiscoveryPath(path); ok && d.views.Local.Synced() {
			endpoint, res := metrics.EndpointResourceList, routing.GroupVersionResult{}
			if p.version == "" {
				endpoint, res = metrics.EndpointGroup, routing.DecideGroup(d.views.Snapshot(), p.group, d.now())
			} else {
				res = routing.DecideGroupVersion(d.views.Snapshot(), p.groupVersion(), d.now())
			}
			if res.Decision == v1alpha1.RouteUnavailable {
				metrics.DiscoveryServed(endpoint, metrics.SourceUnavailable)
				d.groupVersionUnavailable(w, r, res)
				return true
			}
			metrics.DiscoveryServed(endpoint, metrics.SourceLocal)
		}
		return false
	}
	switch {
	case path == "/apis" || path == "/api":
		return d.serveRoot(w, r, d.self)
	case path == openAPIRoot:
		if d.serveOpenAPIRoot(w, r, next) {
			metrics.DiscoveryServed(metrics.EndpointOpenAPI, metrics.SourceMerged)
			return true
		}
		metrics.DiscoveryServed(metrics.EndpointOpenAPI, metrics.SourceLocal)
		return false
	case strings.HasPrefix(path, openAPIPrefix):
		gv, ok := parseOpenAPIPath(path)
		if !ok {
			return false
		}
		if d.serveOpenAPIGroupVersion(w, r, gv) {
			return true
		}
		metrics.DiscoveryServed(metrics.EndpointOpenAPIGroupVersion, metrics.SourceLocal)
		return false
	}
	p, ok := parseDiscoveryPath(path)
	if !ok {
		return false
	}
	if p.version == "" {
		return d.serveGroup(w, r, p.group)
	}
	return d.serveResourceList(w, r, p.groupVersion())
}

// IsDiscoveryPath is true for the paths whose documents the filter merges:
// /api, /apis, /api/v1, /apis/<group> and /apis/<group>/<version>.
func IsDiscoveryPath(path string) bool {
	if path == "/api" || path == "/apis" {
		return true
	}
	_, ok := parseDiscoveryPath(path)
	return ok
}

// discoveryEndpoint is a discovery request's metrics label.
func discoveryEndpoint(r *http.Request) string {
	switch path := r.URL.Path; {
	case path == "/api" || path == "/apis":
		if strings.Contains(r.Header.Get("Accept"), apidiscoveryv2.SchemeGroupVersion.Group) {
			return metrics.EndpointAggregated
		}
		return metrics.EndpointGroupList
	case strings.Count(path, "/") == 2 && strings.HasPrefix(path, "/apis/"):
		return metrics.EndpointGroup
	default:
		return metrics.EndpointResourceList
	}
}

// Server answers the discovery and OpenAPI requests whose true answer is
// the cluster's (Serve). /apis and /api (aggregated, v2) are the merged
// PeerAggregatedDiscovery combined with this server's live local view, so
// a CRD created here shows at once; the legacy /apis, /apis/<group> and
// resource lists are derived from the same combined view (legacyView). A
// request with profile=nopeer, or with X-Kubernetes-Peer-Proxied, gets the
// local view from the chain.
type Server struct {
	views    *views.Views
	proxy    *proxy.Proxier
	answers  status.Answers
	self     string
	now      func() time.Time
	starting func() bool

	mu   sync.Mutex
	key  cacheKey
	apis servedDoc
	api  servedDoc
	// legacy is the legacy form of apis and api (nil until asked for),
	// built with legacyLocal, the local view they were combined with.
	legacy      *legacyView
	legacyLocal *views.LocalDoc

	// openAPIRoots caches peers' /openapi/v3 documents.
	openAPIRoots peerOpenAPIRoots
}

// Config is what a Server takes from the filter.
type Config struct {
	Views   *views.Views
	Proxy   *proxy.Proxier
	Answers status.Answers
	// Self is this server's ID.
	Self string
	// Now is the filter's clock.
	Now func() time.Time
	// Starting tells whether the server is starting: while it holds its
	// readiness, an unsynced discovery document is a 503 rather than the
	// local chain's alone.
	Starting func() bool
}

// New makes a Server.
func New(c Config) *Server {
	return &Server{views: c.Views, proxy: c.Proxy, answers: c.Answers, self: c.Self, now: c.Now, starting: c.Starting}
}

type cacheKey struct {
	local  uint64
	merged string
}

type servedDoc struct {
	list *apidiscoveryv2.APIGroupDiscoveryList
	etag string
}

// serveRoot answers /api and /apis: the aggregated v2 form unless the
// client asked for profile=nopeer, else the legacy /apis. The legacy /api
// (APIVersions: v1 only, served by every server) is the chain's. It
// returns false to let the chain answer.
func (d *Server) serveRoot(w http.ResponseWriter, r *http.Request, self string) bool {
	mt, ok := negotiation.NegotiateMediaTypeOptions(r.Header.Get("Accept"), codecs.SupportedMediaTypes(), aggregated.DiscoveryEndpointRestrictions)
	if ok && aggregated.IsAggregatedDiscoveryGVK(mt.Convert) {
		if mt.Convert.Version != "v2" || mt.Profile == "nopeer" {
			return false
		}
		doc, ok := d.document(r.URL.Path == "/apis", self)
		if !ok {
			return false
		}
		metrics.DiscoveryServed(metrics.EndpointAggregated, metrics.SourceMerged)
		aggregated.ServeHTTPWithETag(doc.list, doc.etag, apidiscoveryv2.SchemeGroupVersion, codecs, w, r)
		return true
	}
	if r.URL.Path != "/apis" {
		return false
	}
	// An Accept that neither form can serve (an aggregated version this
	// filter does not merge) gets the chain's answer.
	if _, _, err := negotiation.NegotiateOutputMediaType(r, codecs, negotiation.DefaultEndpointRestrictions); err != nil {
		return false
	}
	v := d.legacyView(self)
	if v == nil {
		return false
	}
	metrics.DiscoveryServed(metrics.EndpointGroupList, metrics.SourceMerged)
	serveLegacyObject(w, r, servedObject{obj: v.groups, etag: v.etag("", v.groups)})
	return true
}

// legacyView returns the legacy form of the combined view, or nil before
// the caches have one.
func (d *Server) legacyView(self string) *legacyView {
	if _, ok := d.document(true, self); !ok {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.legacy == nil {
		d.legacy = newLegacyView(d.api.list.Items, d.apis.list.Items, d.legacyLocal)
	}
	return d.legacy
}

// document returns the combined document, recomputed only when the local
// view or the merged object changed.
func (d *Server) document(apis bool, self string) (servedDoc, bool) {
	local := d.views.Local.Current()
	routes := d.views.Routes.Current()
	merged := routes.Merged
	if local == nil || merged == nil || !routes.Synced {
		return servedDoc{}, false
	}
	key := cacheKey{local: local.Generation, merged: merged.ResourceVersion}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.key != key || d.apis.list == nil {
		d.apis = combine(local.APIs, merged.Status.APIs.Items, merged.Status.APIs.ETag, self)
		d.api = combine(local.API, merged.Status.API.Items, merged.Status.API.ETag, self)
		// The legacy form is built on its first use: most clients read
		// only the aggregated one.
		d.legacy, d.legacyLocal = nil, local
		d.key = key
	}
	if apis {
		return d.apis, true
	}
	return d.api, true
}

// combine serves the merged document as is when it already holds every
// local group-version-resource (the steady state: every server then answers
// the same bytes and ETag); otherwise local and merged are merged once more.
func combine(local, merged []apidiscoveryv2.APIGroupDiscovery, mergedETag, self string) servedDoc {
	items := merged
	etag := mergedETag
	if !contains(merged, local) {
		items = merge.Merge([]merge.PeerDocument{
			{ServerID: self, Groups: local},
			// The merged view sorts after any server ID, so the local
			// server's order wins as upstream's local-first merge.
			{ServerID: "\xff", Groups: merged},
		}, nil)
		if e, err := merge.ETag(items); err == nil {
			etag = e
		}
	}
	list := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: apidiscoveryv2.SchemeGroupVersion.String()},
		Items:    items,
	}
	return servedDoc{list: list, etag: etag}
}

func contains(merged, local []apidiscoveryv2.APIGroupDiscovery) bool {
	type gv struct{ g, v string }
	have := map[gv]map[string]bool{}
	for _, g := range merged {
		for _, v := range g.Versions {
			rs := map[string]bool{}
			for _, r := range v.Resources {
				rs[r.Resource] = true
			}
			have[gv{g.Name, v.Version}] = rs
		}
	}
	for _, g := range local {
		for _, v := range g.Versions {
			rs, ok := have[gv{g.Name, v.Version}]
			if !ok {
				return false
			}
			for _, r := range v.Resources {
				if !rs[r.Resource] {
					return false
				}
			}
		}
	}
	return true
}

// groupVersionUnavailable answers a group-version document's Unavailable
// decision: 503 with Retry-After while the view lags behind a live server
// that records it ("unrouted"), else without.
func (d *Server) groupVersionUnavailable(w http.ResponseWriter, r *http.Request, res routing.GroupVersionResult) {
	s := status.GroupVersionSubject(res.GroupVersion)
	if !res.RetryAfter() {
		d.answers.NoneReady(w, r, s, res.Reason())
		return
	}
	d.unrouted(w, r, s, res)
}

// unrouted is the 503 with Retry-After of a document that a live server's
// Lease records and the view does not list yet.
func (d *Server) unrouted(w http.ResponseWriter, r *http.Request, s status.Subject, res routing.GroupVersionResult) {
	// The client chose what it asked for: not a metric label (as for
	// unsynced).
	metrics.ProxyError(r.Context(), metrics.ErrorUnrouted, metrics.UnknownLabels)
	metrics.RoutedAnswer(http.StatusServiceUnavailable)
	audit.AddAuditAnnotation(r.Context(), status.AuditDecision, "unrouted")
	d.answers.RetryLater(w, r, s, res.Reason())
}
