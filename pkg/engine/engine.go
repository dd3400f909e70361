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

// Package engine learns the kube-apiservers of a control plane (from
// registration and identity Leases and the default/kubernetes
// EndpointSlices), reads their discovery, and publishes the computed
// objects. All state is owned by one goroutine; scrapes run beside it,
// bounded, each with its own deadline, so one hung peer delays no other.
package engine

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
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

// Engine is the peer engine.
type Engine struct {
	opts      Options
	clock     clock.WithTicker
	scrape    ScrapeFunc
	publisher Publisher
	// recorder is set by Run (startRecording), or by a test before it.
	recorder record.EventRecorder
	clients  Clients

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
	// peerUID gives Events the UID of the object they are about.
	peerUID func(name string) types.UID

	trigger chan struct{}
	results chan scrapeResult
	sem     chan struct{}
}

// peerState is what the engine knows of one peer beyond what it publishes.
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

// scrapeResult is one finished scrape, handed back to the Run goroutine.
type scrapeResult struct {
	id       string
	endpoint string
	doc      Document
	err      error
	took     time.Duration
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
	ctx = klog.NewContext(ctx, logger)
	defer e.startRecording()()
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
			if err := e.publish(); err != nil {
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
