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
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
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
	heartbeat HeartbeatFunc
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
	deletedGVs map[schema.GroupVersion]bool
	badLeases  map[string]string
	// servedMemo decodes a registration Lease's record only when it changed:
	// observe reads every Lease on each event, a renewal every few seconds
	// per server.
	servedMemo peerlease.ServedMemo
	// records are the registration Leases as of the last observe, for
	// the published view; servedSets keeps each one's set of resources
	// while its decoded list is the same.
	records     routing.Records
	servedSets  map[string]servedSet
	initialized bool
	// lastInput is what the last published view was computed from.
	lastInput *publishedInput
	// nextLapse is when the first live Lease lapses unless renewed: Run
	// wakes then, so a server that stops renewing (frozen, crashed, cut
	// off) is seen as gone at once, not at the next refresh.
	nextLapse time.Time
	// leaseHeard is when the Lease informer last delivered an event (Unix
	// ns on the engine's clock): see lapseJudgeTime.
	leaseHeard atomic.Int64
	// discoveryEvent is when the CRD or APIService informer last delivered
	// an event past its initial list (Unix ns on the engine's clock; 0:
	// none): see fullReadDue.
	discoveryEvent atomic.Int64

	// turns counts Run's loop turns that ended in a publish decision: a
	// turn need not publish, so tests wait on this to know an event was
	// handled.
	turns atomic.Uint64
	// applied counts the reads whose results apply handled, for tests to
	// wait on (a heartbeat that changes nothing publishes nothing).
	applied atomic.Uint64

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
	inflight bool
	tried    bool
	// again: the endpoint changed (or a refresh was asked) during a scrape.
	again bool
	// served is what the peer's registration Lease recorded when this
	// replica last looked: a change means the peer's own discovery
	// changed, so it is read again at once.
	served []peerlease.ServedResource
	// etags are the discovery ETags recorded with served when this
	// replica last looked (zero: none): they change with every change of
	// the peer's discovery, including what the list leaves out.
	etags peerlease.DiscoveryETags
	// recordedFrom is the recorded list the documents were built from
	// when they are a recorded list (Recorded).
	recordedFrom []peerlease.ServedResource
	// unidentified: the peer is known only from an EndpointSlice, under
	// its address (no Lease gives it an ID); set when it is created, so
	// that a Lease at that address later is known for the same server.
	unidentified bool
}

// scrapeResult is one finished read, handed back to the Run goroutine.
type scrapeResult struct {
	id       string
	endpoint string
	// heartbeat: only the version was asked (doc is empty but for it).
	heartbeat bool
	doc       Document
	err       error
	took      time.Duration
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
	recheck := e.clock.NewTicker(min(NotReadyRecheck, e.opts.RefreshInterval))
	defer recheck.Stop()
	e.reconcile(ctx, true)
	var lapse clock.Timer
	var lapseAt time.Time
	defer func() {
		if lapse != nil {
			lapse.Stop()
		}
	}()
	for {
		// Wake when the first live Lease lapses (just after: a Lease is
		// live up to its expiry).
		if !e.nextLapse.Equal(lapseAt) {
			if lapse != nil {
				lapse.Stop()
				lapse = nil
			}
			if lapseAt = e.nextLapse; !lapseAt.IsZero() {
				lapse = e.clock.NewTimer(lapseAt.Sub(e.clock.Now()) + lapseSlack)
			}
		}
		var lapsed <-chan time.Time
		if lapse != nil {
			lapsed = lapse.C()
		}
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
		e.turns.Add(1)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			e.reconcile(ctx, true)
		case <-recheck.C():
			e.recheckNotReady(ctx)
		case <-lapsed:
			lapse, lapseAt = nil, time.Time{}
			e.reconcile(ctx, false)
		case <-e.trigger:
			e.reconcile(ctx, false)
		case r := <-e.results:
			e.apply(ctx, r)
		}
	}
}

// lapseSlack is how long after a Lease's expiry Run looks at it again.
const lapseSlack = 50 * time.Millisecond

// Lease lapses are judged only as far as this replica's Lease watch is
// known to work. Live servers renew every peerlease.DefaultRenewInterval,
// so a watch that delivered nothing for two of them is probably stuck (on
// a kube-apiserver that stopped answering), and a Lease that seems to lapse
// meanwhile may have been renewed unseen: marking that server gone would
// end the requests in flight to it. So lapses are judged at the time up to
// which the watch is trusted, and at most one Lease duration late (every
// server may really be gone).
const (
	leaseWatchTrust = 2 * peerlease.DefaultRenewInterval
	maxLapseDelay   = peerlease.DefaultDurationSeconds * time.Second
)

// lapseJudgeTime is the time at which Leases are judged live or lapsed:
// now while the Lease watch is trusted, else the time it was last trusted,
// but never more than maxLapseDelay before now.
func (e *Engine) lapseJudgeTime(now time.Time) time.Time {
	trusted := time.Unix(0, e.leaseHeard.Load()).Add(leaseWatchTrust)
	if !trusted.Before(now) {
		return now
	}
	if floor := now.Add(-maxLapseDelay); trusted.Before(floor) {
		return floor
	}
	return trusted
}

func (e *Engine) allTried() bool {
	for _, p := range e.peers {
		if !p.tried && !p.Left {
			return false
		}
	}
	return true
}
