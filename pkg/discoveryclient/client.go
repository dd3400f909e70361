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
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	versioned "sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
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
