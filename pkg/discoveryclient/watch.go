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
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	pdinformers "sigs.k8s.io/peerdiscovery/pkg/generated/informers/externalversions/peerdiscovery/v1alpha1"
)

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
