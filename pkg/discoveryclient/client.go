// Package discoveryclient is a client-go discovery client that sees every API
// served anywhere in the control plane: it serves discovery from the
// PeerAggregatedDiscovery object ("cluster") that peerdiscovery-apiserver
// computes from every kube-apiserver's own discovery, kept in memory by a
// watch. During a rolling upgrade a controller connected to an old server
// then still sees (and, through the filter's proxying, reads) the APIs only
// newer servers serve.
//
// Client implements discovery.DiscoveryInterface,
// discovery.CachedDiscoveryInterface, discovery.AggregatedDiscoveryInterface
// and their WithContext variants, so it plugs into
// restmapper.NewDeferredDiscoveryRESTMapper, metadata/dynamic informer
// factories, the garbage-collector-like "list everything" loops, etc.
//
// Lifecycle: New, then Start(ctx) (runs the watch until ctx is done), then
// optionally WaitForSync(ctx). Reads made before the first state is known
// wait for it (bounded by the read's context and SyncTimeout). The client is
// not started lazily: the watch's lifetime is the caller's.
//
// Unavailability: when the merged view cannot be used (not started, the
// object is missing, peerdiscovery-apiserver or its API is unreachable) every
// view-returning method answers from the connected server's own discovery
// (client-go's, cached in memory) and returns those results together with an
// error that wraps *FallbackError — the same "partial results + error"
// convention as discovery.ErrGroupDiscoveryFailed. Test it with errors.As, or
// ask Complete(). Stale GroupVersions in the merged view are reported as
// *discovery.ErrGroupDiscoveryFailed, as client-go does. One log line is
// written per transition between the merged view and the fallback.
//
// Returned objects are shared with the cache and with other callers: treat
// them as read-only (client-go's memory cache has the same rule).
package discoveryclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	versioned "sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	pdinformers "sigs.k8s.io/peerdiscovery/pkg/generated/informers/externalversions/peerdiscovery/v1alpha1"
)

// Reasons for falling back, wrapped in FallbackError.Reason.
var (
	// ErrNotStarted: Start was not called (or its context is done).
	ErrNotStarted = errors.New("peer-aggregated discovery client not started")
	// ErrNotSynced: the watch has not delivered a first state in time.
	ErrNotSynced = errors.New("peer-aggregated discovery not synced yet")
	// ErrObjectMissing: PeerAggregatedDiscovery "cluster" does not exist.
	ErrObjectMissing = fmt.Errorf("PeerAggregatedDiscovery %q not found", v1alpha1.PeerAggregatedDiscoveryName)
)

// FallbackError says the results came from the connected server's own
// discovery, not from the merged view of every server: APIs served only by
// other servers may be missing. Reason says why (ErrObjectMissing,
// ErrNotStarted, ErrNotSynced, or the error reading the object); Err is the
// error of the server's own discovery, if any (for example a
// *discovery.ErrGroupDiscoveryFailed). errors.Is/As see both.
type FallbackError struct {
	Reason error
	Err    error
}

func (e *FallbackError) Error() string {
	msg := "discovery incomplete: using the connected server's own discovery because the peer-aggregated view is unavailable: " + errString(e.Reason)
	if e.Err != nil {
		msg += "; " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Reason and Err.
func (e *FallbackError) Unwrap() []error {
	var out []error
	if e.Reason != nil {
		out = append(out, e.Reason)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// IsFallback reports whether err says the results are the fallback's.
func IsFallback(err error) bool {
	var fe *FallbackError
	return errors.As(err, &fe)
}

func errString(err error) string {
	if err == nil {
		return "unknown"
	}
	return err.Error()
}

// SyncTimeout bounds how long a read made before the watch has delivered a
// first state waits for it before answering from the fallback.
const SyncTimeout = 10 * time.Second

// state is one immutable snapshot: the merged view, or the fallback reason.
type state struct {
	gen    uint64
	view   *view // nil when falling back
	reason error // why falling back
}

// Client is a discovery client over the merged view. Create it with New.
type Client struct {
	pd       versioned.Interface
	fallback discovery.CachedDiscoveryInterfaceWithContext
	legacy   discovery.CachedDiscoveryInterface

	st     atomic.Pointer[state]
	served atomic.Uint64 // gen of the last state a full read returned

	mu        sync.Mutex // serializes transitions
	logger    klog.Logger
	started   atomic.Bool
	startOnce sync.Once
	decided   chan struct{}
	decideOne sync.Once
	informer  cache.SharedIndexInformer
}

var (
	_ discovery.CachedDiscoveryInterface                = &Client{}
	_ discovery.CachedDiscoveryInterfaceWithContext     = &Client{}
	_ discovery.AggregatedDiscoveryInterface            = &Client{}
	_ discovery.AggregatedDiscoveryInterfaceWithContext = &Client{}
	_ discovery.DiscoveryInterfaces                     = &Client{}
)

// New returns a Client for cfg: it reads PeerAggregatedDiscovery through
// cfg's server (and the aggregator) and falls back to that server's own
// discovery. Call Start.
func New(cfg *rest.Config) (*Client, error) {
	pd, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	direct, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewForClients(pd, direct), nil
}

// NewForClients returns a Client that watches PeerAggregatedDiscovery with pd
// and falls back to direct, which it caches in memory (unless it already is
// a CachedDiscoveryInterface).
func NewForClients(pd versioned.Interface, direct discovery.DiscoveryInterface) *Client {
	cached, ok := direct.(discovery.CachedDiscoveryInterface)
	if !ok {
		cached = memory.NewMemCacheClient(direct)
	}
	c := &Client{
		pd:       pd,
		legacy:   cached,
		fallback: discovery.ToCachedDiscoveryInterfaceWithContext(cached),
		logger:   klog.Background().WithName("peer-discovery-client"),
		decided:  make(chan struct{}),
	}
	c.st.Store(&state{reason: ErrNotStarted})
	return c
}

// Start runs the watch on PeerAggregatedDiscovery "cluster" until ctx is
// done. It returns at once; calling it again does nothing. When ctx is done
// the client falls back (ErrNotStarted).
func (c *Client) Start(ctx context.Context) {
	c.startOnce.Do(func() {
		c.logger = klog.FromContext(ctx).WithName("peer-discovery-client")
		inf := pdinformers.NewFilteredPeerAggregatedDiscoveryInformer(c.pd, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", v1alpha1.PeerAggregatedDiscoveryName).String()
		})
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.onObject(obj) },
			UpdateFunc: func(_, obj any) { c.onObject(obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if o, ok := obj.(*v1alpha1.PeerAggregatedDiscovery); ok && o.Name == v1alpha1.PeerAggregatedDiscoveryName {
					c.fallBack(ErrObjectMissing)
				}
			},
		})
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			if err == io.EOF || err == io.ErrUnexpectedEOF || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return // the informer resumes or relists; the view is still current
			}
			c.fallBack(fmt.Errorf("reading PeerAggregatedDiscovery: %w", err))
		})
		c.informer = inf
		c.started.Store(true)
		c.mu.Lock()
		if c.st.Load().view == nil {
			c.storeLocked(&state{reason: ErrNotSynced})
		}
		c.mu.Unlock()
		go inf.RunWithContext(ctx)
		go func() {
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				return
			}
			if _, exists, _ := inf.GetStore().GetByKey(v1alpha1.PeerAggregatedDiscoveryName); !exists {
				c.fallBack(ErrObjectMissing)
			}
		}()
		go func() {
			<-ctx.Done()
			c.started.Store(false)
			c.fallBack(ErrNotStarted)
		}()
	})
}

// WaitForSync waits until the watch has delivered a first state. It returns
// nil when the merged view is in use, a *FallbackError when the client
// falls back, or ctx's error.
func (c *Client) WaitForSync(ctx context.Context) error {
	if !c.started.Load() {
		return &FallbackError{Reason: ErrNotStarted}
	}
	select {
	case <-c.decided:
	case <-ctx.Done():
		return ctx.Err()
	}
	if st := c.st.Load(); st.view == nil {
		return &FallbackError{Reason: st.reason}
	}
	return nil
}

// Complete reports whether reads are served from the merged view of every
// server with no stale GroupVersion.
func (c *Client) Complete() bool {
	st := c.st.Load()
	return st.view != nil && len(st.view.failed) == 0
}

// ETags returns the merged /api and /apis ETags in use, empty when falling
// back.
func (c *Client) ETags() (api, apis string) {
	if v := c.st.Load().view; v != nil {
		return v.apiETag, v.apisETag
	}
	return "", ""
}

func (c *Client) onObject(obj any) {
	o, ok := obj.(*v1alpha1.PeerAggregatedDiscovery)
	if !ok || o.Name != v1alpha1.PeerAggregatedDiscoveryName {
		return
	}
	cur := c.st.Load()
	if cur.view != nil && cur.view.resourceVersion == o.ResourceVersion &&
		cur.view.apiETag == o.Status.API.ETag && cur.view.apisETag == o.Status.APIs.ETag {
		c.markDecided() // a relist of the object we have
		return
	}
	v := newView(o)
	c.mu.Lock()
	prev := c.st.Load()
	c.storeLocked(&state{view: v})
	c.mu.Unlock()
	if prev.view == nil {
		c.logger.Info("Serving discovery from the peer-aggregated view of every kube-apiserver",
			"etag", short(v.apisETag), "groups", len(v.groups), "resources", v.gvrCount, "staleGroupVersions", len(v.failed))
	} else {
		c.logger.V(2).Info("Peer-aggregated discovery updated", "etag", short(v.apisETag), "groups", len(v.groups), "resources", v.gvrCount)
	}
	c.markDecided()
}

func (c *Client) fallBack(reason error) {
	c.mu.Lock()
	prev := c.st.Load()
	if prev.view == nil && prev.reason != nil && reason != nil && prev.reason.Error() == reason.Error() {
		c.mu.Unlock()
		c.markDecided()
		return
	}
	c.storeLocked(&state{reason: reason})
	c.mu.Unlock()
	if prev.view != nil || prev.reason == ErrNotSynced || prev.reason == ErrNotStarted {
		if reason != ErrNotStarted {
			c.logger.Info("Falling back to the connected kube-apiserver's own discovery: APIs served only by other servers may be missing", "reason", errString(reason))
		}
	} else {
		c.logger.V(2).Info("Peer-aggregated discovery still unavailable", "reason", errString(reason))
	}
	if reason != ErrNotStarted {
		c.markDecided()
	}
}

func (c *Client) storeLocked(s *state) {
	s.gen = c.st.Load().gen + 1
	c.st.Store(s)
}

func (c *Client) markDecided() { c.decideOne.Do(func() { close(c.decided) }) }

func short(etag string) string {
	if len(etag) > 16 {
		return etag[:16]
	}
	return etag
}

// current returns the state to answer from, waiting (bounded) for the first
// state after Start.
func (c *Client) current(ctx context.Context) *state {
	st := c.st.Load()
	if st.view != nil || st.reason != ErrNotSynced {
		return st
	}
	t := time.NewTimer(SyncTimeout)
	defer t.Stop()
	select {
	case <-c.decided:
	case <-ctx.Done():
	case <-t.C:
	}
	return c.st.Load()
}

func (c *Client) fallbackErr(st *state, err error) error {
	return &FallbackError{Reason: st.reason, Err: err}
}

// ServerGroupsWithContext returns every group served by any server.
func (c *Client) ServerGroupsWithContext(ctx context.Context) (*metav1.APIGroupList, error) {
	st := c.current(ctx)
	c.served.Store(st.gen)
	if st.view != nil {
		return st.view.groupList, nil
	}
	gl, err := c.fallback.ServerGroupsWithContext(ctx)
	return gl, c.fallbackErr(st, err)
}

// ServerGroups returns every group served by any server.
func (c *Client) ServerGroups() (*metav1.APIGroupList, error) {
	return c.ServerGroupsWithContext(context.Background())
}

// ServerResourcesForGroupVersionWithContext returns the resources of one
// group/version ("v1" for core). An unknown group/version returns
// memory.ErrCacheNotFound; a stale one its StaleGroupVersionError.
func (c *Client) ServerResourcesForGroupVersionWithContext(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error) {
	st := c.current(ctx)
	if st.view != nil {
		if l, ok := st.view.byGVString[groupVersion]; ok {
			return l, nil
		}
		if gv, err := schema.ParseGroupVersion(groupVersion); err == nil {
			if ferr, ok := st.view.failed[gv]; ok {
				return nil, ferr
			}
		}
		return nil, memory.ErrCacheNotFound
	}
	l, err := c.fallback.ServerResourcesForGroupVersionWithContext(ctx, groupVersion)
	return l, c.fallbackErr(st, err)
}

// ServerResourcesForGroupVersion returns the resources of one group/version.
func (c *Client) ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error) {
	return c.ServerResourcesForGroupVersionWithContext(context.Background(), groupVersion)
}

// ServerGroupsAndResourcesWithContext returns every group and every
// group/version's resources, in discovery order.
func (c *Client) ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	st := c.current(ctx)
	c.served.Store(st.gen)
	if v := st.view; v != nil {
		return append([]*metav1.APIGroup(nil), v.groups...), append([]*metav1.APIResourceList(nil), v.lists...), v.failedErr()
	}
	gs, rs, err := c.fallback.ServerGroupsAndResourcesWithContext(ctx)
	return gs, rs, c.fallbackErr(st, err)
}

// ServerGroupsAndResources returns every group and every group/version's
// resources.
func (c *Client) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return c.ServerGroupsAndResourcesWithContext(context.Background())
}

// ServerPreferredResourcesWithContext returns each resource in its group's
// preferred version (the first version of the merged group).
func (c *Client) ServerPreferredResourcesWithContext(ctx context.Context) ([]*metav1.APIResourceList, error) {
	st := c.current(ctx)
	c.served.Store(st.gen)
	if v := st.view; v != nil {
		return append([]*metav1.APIResourceList(nil), v.preferred...), v.failedErr()
	}
	rs, err := c.fallback.ServerPreferredResourcesWithContext(ctx)
	return rs, c.fallbackErr(st, err)
}

// ServerPreferredResources returns each resource in its preferred version.
func (c *Client) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return c.ServerPreferredResourcesWithContext(context.Background())
}

// ServerPreferredNamespacedResourcesWithContext is
// ServerPreferredResourcesWithContext restricted to namespaced resources.
func (c *Client) ServerPreferredNamespacedResourcesWithContext(ctx context.Context) ([]*metav1.APIResourceList, error) {
	st := c.current(ctx)
	c.served.Store(st.gen)
	if v := st.view; v != nil {
		return append([]*metav1.APIResourceList(nil), v.preferredNamespaced...), v.failedErr()
	}
	rs, err := c.fallback.ServerPreferredNamespacedResourcesWithContext(ctx)
	return rs, c.fallbackErr(st, err)
}

// ServerPreferredNamespacedResources returns the preferred namespaced
// resources.
func (c *Client) ServerPreferredNamespacedResources() ([]*metav1.APIResourceList, error) {
	return c.ServerPreferredNamespacedResourcesWithContext(context.Background())
}

// GroupsAndMaybeResourcesWithContext implements
// discovery.AggregatedDiscoveryInterfaceWithContext. The maps are copies.
func (c *Client) GroupsAndMaybeResourcesWithContext(ctx context.Context) (*metav1.APIGroupList, map[schema.GroupVersion]*metav1.APIResourceList, map[schema.GroupVersion]error, error) {
	st := c.current(ctx)
	c.served.Store(st.gen)
	if v := st.view; v != nil {
		rs := make(map[schema.GroupVersion]*metav1.APIResourceList, len(v.byGV))
		for gv, l := range v.byGV {
			rs[gv] = l
		}
		failed := make(map[schema.GroupVersion]error, len(v.failed))
		for gv, err := range v.failed {
			failed[gv] = err
		}
		return v.groupList, rs, failed, nil
	}
	var (
		gl     *metav1.APIGroupList
		rs     map[schema.GroupVersion]*metav1.APIResourceList
		failed map[schema.GroupVersion]error
		err    error
	)
	if ad, ok := c.fallback.(discovery.AggregatedDiscoveryInterfaceWithContext); ok {
		gl, rs, failed, err = ad.GroupsAndMaybeResourcesWithContext(ctx)
	} else {
		gl, err = c.fallback.ServerGroupsWithContext(ctx)
	}
	return gl, rs, failed, c.fallbackErr(st, err)
}

// GroupsAndMaybeResources implements discovery.AggregatedDiscoveryInterface.
func (c *Client) GroupsAndMaybeResources() (*metav1.APIGroupList, map[schema.GroupVersion]*metav1.APIResourceList, map[schema.GroupVersion]error, error) {
	return c.GroupsAndMaybeResourcesWithContext(context.Background())
}

// FreshWithContext reports whether a retry after a cache miss is pointless:
// true when the merged view a caller last read is still the current one
// (the watch keeps it current). After the view changed, or while falling
// back (unless the fallback cache was just filled), it is false, so
// DeferredDiscoveryRESTMapper resets and sees the new view on a miss.
func (c *Client) FreshWithContext(ctx context.Context) bool {
	st := c.st.Load()
	if st.gen != c.served.Load() {
		return false
	}
	if st.view != nil {
		return true
	}
	if st.reason == ErrNotSynced {
		return false // the first state is coming: a retry may see more
	}
	return c.fallback.FreshWithContext(ctx)
}

// Fresh is FreshWithContext.
func (c *Client) Fresh() bool { return c.FreshWithContext(context.Background()) }

// InvalidateWithContext drops the fallback's cache. The merged view is not
// dropped: the watch already keeps it equal to the server's object, and the
// next read returns the current one.
func (c *Client) InvalidateWithContext(ctx context.Context) {
	c.fallback.InvalidateWithContext(ctx)
}

// Invalidate is InvalidateWithContext.
func (c *Client) Invalidate() { c.InvalidateWithContext(context.Background()) }

// RESTClient is the connected server's discovery REST client.
func (c *Client) RESTClient() rest.Interface { return c.fallback.RESTClient() }

// ServerVersionWithContext is the connected server's version.
func (c *Client) ServerVersionWithContext(ctx context.Context) (*version.Info, error) {
	return c.fallback.ServerVersionWithContext(ctx)
}

// ServerVersion is the connected server's version.
func (c *Client) ServerVersion() (*version.Info, error) {
	return c.ServerVersionWithContext(context.Background())
}

// OpenAPISchemaWithContext is the connected server's OpenAPI v2 document.
func (c *Client) OpenAPISchemaWithContext(ctx context.Context) (*openapi_v2.Document, error) {
	return c.fallback.OpenAPISchemaWithContext(ctx)
}

// OpenAPISchema is the connected server's OpenAPI v2 document.
func (c *Client) OpenAPISchema() (*openapi_v2.Document, error) {
	return c.OpenAPISchemaWithContext(context.Background())
}

// OpenAPIV3WithContext is the connected server's OpenAPI v3 client.
func (c *Client) OpenAPIV3WithContext(ctx context.Context) openapi.ClientWithContext {
	return c.fallback.OpenAPIV3WithContext(ctx)
}

// OpenAPIV3 is the connected server's OpenAPI v3 client.
func (c *Client) OpenAPIV3() openapi.Client { return c.legacy.OpenAPIV3() }

// WithLegacy is the connected server's legacy-format discovery client. A
// kube-apiserver with the filter answers the legacy endpoints (/apis,
// /apis/<group>, /apis/<group>/<version>) for the whole cluster, so it
// finds the same GVRs as the merged view (test/discoverycheck checks it);
// a server without the filter gives its own view.
func (c *Client) WithLegacy() discovery.DiscoveryInterface { return c.legacy.WithLegacy() }

// WithLegacyWithContext is WithLegacy.
func (c *Client) WithLegacyWithContext(ctx context.Context) discovery.DiscoveryInterfaceWithContext {
	return c.fallback.WithLegacyWithContext(ctx)
}
