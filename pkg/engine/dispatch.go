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

package engine

import (
	"context"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	corev1 "k8s.io/api/core/v1"
	peerproxymetrics "k8s.io/apiserver/pkg/util/peerproxy/metrics"
)

// NotReadyRecheck is how often a live peer whose last read failed is read
// again, apart from the refresh: a server that was frozen, cut off or
// restarted under the same ID (its Lease never lapsed, its served list
// unchanged, so nothing else triggers a read) is ready in the view about
// a second after it answers again, not up to --refresh-interval plus
// --scrape-timeout later. A failed read is cheap to repeat: a refused
// connection costs nothing, a hanging one stays the only one in flight.
const NotReadyRecheck = time.Second

// recheckNotReady reads again every live peer that was read and is not
// ready, unless a read is in flight.
func (e *Engine) recheckNotReady(ctx context.Context) {
	for _, p := range e.peers {
		if p.tried && !p.Ready && !p.Left && !p.inflight {
			e.startScrape(ctx, p)
		}
	}
}

// startScrape reads p's whole discovery, now or, when a read is in
// flight, right after it.
func (e *Engine) startScrape(ctx context.Context, p *peerState) {
	if p.Left || p.Endpoint == "" {
		return
	}
	if p.inflight {
		p.again = true
		return
	}
	p.again = false
	// The documents go with their ETags: an unchanged one (304) is kept.
	var prev *nopeer.Documents
	if p.HasDocument {
		prev = &nopeer.Documents{API: p.API, APIs: p.APIs, APIETag: p.APIETag, APIsETag: p.APIsETag}
	}
	e.startRead(ctx, p, false, func(ctx context.Context, endpoint string) (Document, error) {
		return e.scrape(ctx, endpoint, prev)
	})
}

// startHeartbeat asks a ready peer for its version, unless a read is in
// flight (that one answers for its readiness).
func (e *Engine) startHeartbeat(ctx context.Context, p *peerState) {
	if p.Left || p.Endpoint == "" || p.inflight {
		return
	}
	e.startRead(ctx, p, true, func(ctx context.Context, endpoint string) (Document, error) {
		v, err := e.heartbeat(ctx, endpoint)
		return Document{Version: v}, err
	})
}

// startRead runs read against p's endpoint beside the Run goroutine, under
// the concurrency bound and --scrape-timeout, and hands the result back.
func (e *Engine) startRead(ctx context.Context, p *peerState, heartbeat bool, read func(context.Context, string) (Document, error)) {
	p.inflight = true
	id, endpoint := p.ServerID, p.Endpoint
	go func() {
		select {
		case e.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-e.sem }()
		rctx, cancel := context.WithTimeout(ctx, e.opts.ScrapeTimeout)
		defer cancel()
		start := e.clock.Now()
		doc, err := read(rctx, endpoint)
		select {
		case e.results <- scrapeResult{id: id, endpoint: endpoint, heartbeat: heartbeat, doc: doc, err: err, took: e.clock.Since(start)}:
		case <-ctx.Done():
		}
	}()
}

// fullReadDue tells whether a refresh reads p's whole discovery rather
// than its version. A peer whose registration Lease records nothing (an
// upstream kube-apiserver, a peer known from an EndpointSlice, a filter
// that could not encode its list) signals no change of its discovery, so
// it is read in full each refresh; a peer that is not ready becomes ready
// only by a full read. For discoveryChurnRefreshes refresh intervals after
// a CRD or APIService event every refresh is a full read: a server's /apis shows
// the change seconds after the event (a CRD once established, an
// APIService once this server finds it available), each server at its own
// moment, so the read the event starts can come too early. Any other peer
// is read in full once per --resync-interval, the safety poll; its filter
// records its discovery's ETags whenever they change (after its own read
// each minute, or at once after a CRD or APIService event), and a new
// record reads it at once (follow). A record without ETags (a filter from
// before them) says nothing of the resources its list leaves out, so that
// peer keeps a safety poll of untaggedResyncInterval.
func (e *Engine) fullReadDue(p *peerState, now time.Time) bool {
	resync := e.opts.ResyncInterval
	if p.etags.IsZero() {
		resync = min(resync, untaggedResyncInterval)
	}
	if len(p.served) == 0 || !p.Ready || now.Sub(p.LastSyncTime) >= resync {
		return true
	}
	last := e.discoveryEvent.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) < discoveryChurnRefreshes*e.opts.RefreshInterval
}

// untaggedResyncInterval is the safety poll of a peer whose record has no
// discovery ETags: the filter's own read interval, the staleness bound
// before the ETags were recorded.
const untaggedResyncInterval = time.Minute

// discoveryChurnRefreshes is how many refresh intervals after a CRD or
// APIService event every refresh reads every peer in full.
const discoveryChurnRefreshes = 3

func (e *Engine) apply(ctx context.Context, r scrapeResult) {
	defer e.applied.Add(1)
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
		typ := nopeer.TypeOf(r.err)
		peerproxymetrics.IncPeerDiscoverySyncError(ctx, string(typ))
		observeRead(r, "error")
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
	case r.heartbeat:
		observeRead(r, "success")
		// Only a full read makes a peer ready, and a new binary may serve
		// another list under the same record (a patch release's).
		if !p.Ready || (r.doc.Version != "" && r.doc.Version != p.BinaryVersion) {
			p.again = true
		}
	default:
		observeRead(r, "success")
		if !r.doc.NotModified {
			p.API, p.APIs, p.APIETag, p.APIsETag = r.doc.API, r.doc.APIs, r.doc.APIETag, r.doc.APIsETag
			p.HasDocument, p.Recorded = true, false
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

func observeRead(r scrapeResult, result string) {
	if r.heartbeat {
		heartbeatDuration.WithLabelValues(result).Observe(r.took.Seconds())
		return
	}
	scrapeDuration.WithLabelValues(result).Observe(r.took.Seconds())
}
