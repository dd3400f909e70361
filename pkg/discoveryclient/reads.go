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

package discoveryclient

import (
	"context"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
)

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
	return c.preferred(ctx, func(v *view) []*metav1.APIResourceList { return v.preferred }, c.fallback.ServerPreferredResourcesWithContext)
}

// ServerPreferredResources returns each resource in its preferred version.
func (c *Client) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return c.ServerPreferredResourcesWithContext(context.Background())
}

// ServerPreferredNamespacedResourcesWithContext is
// ServerPreferredResourcesWithContext restricted to namespaced resources.
func (c *Client) ServerPreferredNamespacedResourcesWithContext(ctx context.Context) ([]*metav1.APIResourceList, error) {
	return c.preferred(ctx, func(v *view) []*metav1.APIResourceList { return v.preferredNamespaced }, c.fallback.ServerPreferredNamespacedResourcesWithContext)
}

// preferred answers a copy of the view's list, or the fallback's.
func (c *Client) preferred(ctx context.Context, merged func(*view) []*metav1.APIResourceList, fallback func(context.Context) ([]*metav1.APIResourceList, error)) ([]*metav1.APIResourceList, error) {
	st := c.current(ctx)
	c.served.Store(st.gen)
	if v := st.view; v != nil {
		return append([]*metav1.APIResourceList(nil), merged(v)...), v.failedErr()
	}
	rs, err := fallback(ctx)
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
