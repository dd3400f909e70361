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

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/filter/status"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// PeerProxiedHeader marks a request a peer already proxied (upstream's
// name).
const PeerProxiedHeader = "X-Kubernetes-Peer-Proxied"

// Target is where Serve sends one request, and what it is for.
type Target struct {
	// Candidates are the peers to try, in order.
	Candidates []routing.Peer
	// GVR is the resource requested (zero for a discovery document): a
	// candidate is tried only while the snapshot still makes it one.
	GVR   schema.GroupVersionResource
	About status.Subject
	// Decided is the snapshot the candidates were decided on (nil: not
	// known). While it is still the current one, the first candidate is
	// tried without asking again: the decision has just said it may be.
	Decided *routing.Snapshot
	// LongRunning requests (kube-apiserver's LongRunningFunc: watches,
	// logs, exec...) use the pool without a response header timeout and
	// stream at once.
	LongRunning bool
}

// Serve proxies r to the first candidate that takes it. Whether a try may
// have reached the peer is read from the transport (httptrace: the request
// headers were written), never guessed from error types:
//
//   - not reached: the next candidate is tried, writes included; when none
//     can be reached the answer is 503 with Retry-After (nothing happened,
//     so a client retry is safe), without it when each refused the
//     connection (nothing listens there: not back within seconds);
//   - reached, GET or HEAD, no response byte written: the next candidate is
//     tried (a safe method: repeating it changes nothing);
//   - reached, any other method: never sent again, and answered 502 (504
//     on a timeout) without Retry-After, so no client replays it either.
//
// An attempt ends at once when the view marks its peer not ready because it
// stopped answering (StopPeer; a peer that departed gracefully
// finishes its requests in flight instead): it counts as a timeout of that
// peer, so a read with no response byte written goes on to the next
// candidate and a write gets 504; a watch's stream ends cleanly and the
// client watches again.
func (p *Proxier) Serve(w http.ResponseWriter, r *http.Request, t Target) {
	ctx := r.Context()
	logger := klog.FromContext(ctx)
	u, ok := apirequest.UserFrom(ctx)
	if !ok {
		responsewriters.InternalError(w, r, errors.New("no user in the request context"))
		return
	}
	start := p.clock.Now()
	body := &replayableBody{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body
	}
	upgrade := httpstream.IsUpgradeRequest(r)
	// What to do with a peer's answer is decided once, here: a read may be
	// repeated on the next candidate, so its start is read ahead.
	safe := !upgrade && (r.Method == http.MethodGet || r.Method == http.MethodHead)
	key := proxyKey{answer: answerPlain}
	switch {
	case t.LongRunning:
		key.answer = answerStream
	case safe:
		key.answer = answerReadAhead
	}
	audit.AddAuditAnnotation(ctx, status.AuditDecision, string(v1alpha1.RouteProxy))
	// The peer's Cache-Control is the answer's (an OpenAPI document at its
	// hash is immutable): the reverse proxy adds response headers to those
	// already set, and the chain's default (WithCacheControl's "no-cache,
	// private") would go out beside it. An answer of this server's own
	// gets the default back.
	chainCacheControl := w.Header().Values("Cache-Control")
	w.Header().Del("Cache-Control")
	var tried []string // candidates that failed before the current one
	refused := 0       // of them, those whose connection was refused
	for i, peer := range t.Candidates {
		// Bound to the peer before its readiness is checked: a peer
		// stopped after the check ends this attempt, one stopped before
		// fails the check.
		actx, release := p.inflight.bind(ctx, peer.ID)
		if p.snapshot != nil {
			if snap := p.snapshot.Load(); (i > 0 || snap != t.Decided) && !snap.StillCandidate(peer, t.GVR, p.clock.Now()) {
				release()
				tried = append(tried, peer.ID)
				continue
			}
		}
		// The reverse proxy always writes the header; an upgrade's spliced
		// answer may not go through WriteHeader.
		tw := &trackingWriter{ResponseWriter: w, code: http.StatusOK}
		var reached bool
		if upgrade {
			p.serveUpgrade(tw, r, peer.Endpoint, u)
			// UpgradeAwareHandler dials (TCP and TLS) before it writes
			// the request, and names dial errors with this prefix.
			reached = tw.err == nil || !strings.HasPrefix(tw.err.Error(), upgradeDialErrorPrefix)
		} else {
			key.endpoint = peer.Endpoint
			rp, ok := p.proxies.Load(key)
			if !ok {
				rp = p.newReverseProxy(key)
			}
			a := &attempt{}
			rp.(*httputil.ReverseProxy).ServeHTTP(tw, r.WithContext(httptrace.WithClientTrace(actx, &httptrace.ClientTrace{WroteHeaders: a.wroteRequest})))
			reached = a.wroteHeaders.Load()
		}
		if release() && tw.err != nil {
			tw.err = fmt.Errorf("%w: %v", errPeerStopped, tw.err)
		}
		if tw.err == nil {
			audit.AddAuditAnnotation(ctx, status.AuditProxiedTo, peer.ID)
			if len(tried) > 0 {
				annotateFailedOver(ctx, tried)
			}
			metrics.Proxied(ctx, t.About.Labels, tw.code, p.clock.Since(start))
			return
		}
		if ctx.Err() != nil {
			// The client left or the request deadline passed: the outer
			// filters answer; nothing to retry.
			ownAnswer(w, chainCacheControl)
			metrics.ProxyError(ctx, metrics.ErrorCanceled, t.About.Labels)
			logger.V(2).Info("peerdiscovery filter: request ended while proxying", "peer", peer.ID, "for", t.About.Name(), "err", tw.err)
			return
		}
		if !reached && !body.used() && !tw.wrote {
			if errors.Is(tw.err, syscall.ECONNREFUSED) {
				refused++
			}
			metrics.ProxyError(ctx, metrics.ErrorConnect, t.About.Labels)
			logger.V(2).Info("peerdiscovery filter: peer could not be reached, trying the next", "peer", peer.ID, "for", t.About.Name(), "err", tw.err)
			tried = append(tried, peer.ID)
			continue
		}
		metrics.ProxyError(ctx, metrics.ErrorProxy, t.About.Labels)
		logger.Error(tw.err, "peerdiscovery filter: proxying failed after the peer may have received the request", "peer", peer.ID, "for", t.About.Name(), "method", r.Method)
		if safe && !tw.wrote {
			tried = append(tried, peer.ID)
			continue
		}
		audit.AddAuditAnnotation(ctx, status.AuditProxiedTo, peer.ID)
		if len(tried) > 0 {
			annotateFailedOver(ctx, tried)
		}
		if tw.wrote {
			// The response had started: nothing more can be said.
			metrics.RoutedAnswer(tw.code)
			return
		}
		ownAnswer(w, chainCacheControl)
		p.Answers.SentButFailed(w, r, t.About, peer.ID, tw.err)
		return
	}
	ownAnswer(w, chainCacheControl)
	if len(tried) > 0 {
		annotateFailedOver(ctx, tried)
	}
	audit.AddAuditAnnotation(ctx, status.AuditError, "no peer could take the request")
	if p.allGone(tried) {
		// The view the candidates came from is older than their Leases
		// (every replica restarting, say): nothing says when one will be
		// back, as for a decision of none ready.
		p.Answers.NoneReady(w, r, t.About, "no peer serving it answers, and the registration lease of each records its departure or lapsed over "+routing.RecoveryWindow.String()+" ago (tried "+strings.Join(tried, ", ")+")")
		return
	}
	if len(tried) > 0 && refused == len(tried) {
		// Nothing listens where any of them was: crashed or killed,
		// not back within seconds (routing.RecoveryWindow), so a
		// Retry-After would hold the client for a failure all the same.
		p.Answers.NoneReady(w, r, t.About, "no peer serving it accepts connections, so none is expected back within seconds (tried "+strings.Join(tried, ", ")+")")
		return
	}
	p.Answers.Unavailable(w, r, t.About, "no peer serving it could be reached (tried "+strings.Join(tried, ", ")+")")
}

// allGone is true when every peer in ids is gone for good: its
// registration Lease records a departure or lapsed over
// routing.RecoveryWindow ago.
func (p *Proxier) allGone(ids []string) bool {
	if p.snapshot == nil || len(ids) == 0 {
		return false
	}
	snap, now := p.snapshot.Load(), p.clock.Now()
	for _, id := range ids {
		if !snap.GoneForGood(id, now) {
			return false
		}
	}
	return true
}

// ownAnswer puts back the chain's Cache-Control for an answer this server
// writes itself.
func ownAnswer(w http.ResponseWriter, chainCacheControl []string) {
	if len(chainCacheControl) > 0 && len(w.Header().Values("Cache-Control")) == 0 {
		w.Header()["Cache-Control"] = chainCacheControl
	}
}

// annotateFailedOver names the candidates tried before the one that
// answered (or before giving up).
func annotateFailedOver(ctx context.Context, ids []string) {
	audit.AddAuditAnnotation(ctx, status.AuditFailedOver, strings.Join(ids, ","))
}

// serveUpgrade proxies an upgrade (exec, attach, port-forward, websocket)
// with UpgradeAwareHandler, which dials the peer and splices the hijacked
// connections. The identity is set on the request it writes to the peer as
// is (no hop-by-hop stripping after it): the upgrade dial does not go
// through a round tripper (upstream loses the identity there).
func (p *Proxier) serveUpgrade(tw *trackingWriter, r *http.Request, endpoint string, u user.Info) {
	location := &url.URL{Scheme: "https", Host: endpoint, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	out := r.Clone(r.Context())
	out.URL = location
	out.Host = location.Host
	out.RequestURI = ""
	setPeerHeaders(out, u)
	h := utilproxy.NewUpgradeAwareHandler(location, p.transports.Load().long, false, false, errorRecorder{tw})
	h.UseLocationHost = true
	h.RejectForwardingRedirects = true
	// The wrapper keeps the writer's Flusher, CloseNotifier and (on HTTP/1)
	// Hijacker, which upgrades need.
	h.ServeHTTP(responsewriter.WrapForHTTP1Or2(tw), out)
}

// setPeerHeaders makes the headers of a request to a peer: whatever the
// client sent, the peer sees exactly the authenticated user of this server
// (set for the front-proxy client certificate), the loop header and this
// request's Audit-ID. It must run after hop-by-hop stripping (a client's
// Connection header could name any of them).
func setPeerHeaders(out *http.Request, u user.Info) {
	h := out.Header
	for k := range h {
		// Identity a client claims for itself: X-Remote-* (any case) and
		// impersonation, which this server has already applied.
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-remote-") || strings.HasPrefix(lk, "impersonate-") {
			delete(h, k)
		}
	}
	for _, k := range clientOnlyHeaders {
		h.Del(k)
	}
	if u == nil {
		u = &user.DefaultInfo{}
	}
	transport.SetAuthProxyHeaders(out, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
	h.Set(PeerProxiedHeader, "true")
	if id, ok := audit.AuditIDFrom(out.Context()); ok && id != "" {
		h.Set(auditinternal.HeaderAuditID, string(id))
	}
}

// clientOnlyHeaders are removed from every request to a peer.
var clientOnlyHeaders = []string{
	// The client's credentials: the peer trusts this server's certificate.
	"Authorization",
	"Proxy-Authorization",
	// Go's transport replays a request carrying these after a connection
	// failure, even when the peer may have processed it.
	"Idempotency-Key",
	"X-Idempotency-Key",
	// Set again from this server's audit context.
	auditinternal.HeaderAuditID,
}

// maxCachedProxies bounds the reverse proxy cache: endpoints change when
// servers move, and a cache rebuilt from scratch costs one allocation each.
const maxCachedProxies = 256

// proxyKey names a cached reverse proxy: one per peer endpoint and way of
// handling the answer.
type proxyKey struct {
	endpoint string
	answer   answerHandling
}

// answerHandling is what a reverse proxy does with a peer's answer
// (modifyResponse) and which pool it uses.
type answerHandling uint8

const (
	// answerPlain: a write, passed on as it comes.
	answerPlain answerHandling = iota
	// answerReadAhead: a read (GET, HEAD) that is not long-running: its
	// start is read before anything goes to the client (readAhead).
	answerReadAhead
	// answerStream: long-running (watch, logs): no response header
	// timeout, streamed at once, ended cleanly (endCleanly).
	answerStream
)

// newReverseProxy builds and caches the reverse proxy of key (Serve loads
// a cached one first). Its Rewrite runs after httputil.ReverseProxy has
// removed the hop-by-hop headers (those the client's Connection header
// names included), so the identity, loop and Audit-ID headers it sets
// reach the peer whatever the client sent. Errors are recorded in the
// trackingWriter, so that Serve can decide whether to try the next peer;
// redirects are refused as UpgradeAwareHandler's RejectForwardingRedirects
// does; the transport is read per request, so a CA reload takes effect at
// once.
func (p *Proxier) newReverseProxy(key proxyKey) *httputil.ReverseProxy {
	endpoint := key.endpoint
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", endpoint
			pr.Out.Host = endpoint
			// Keep the client's X-Forwarded-For chain and append the
			// client's address, as a Director-based proxy does.
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			u, _ := apirequest.UserFrom(pr.In.Context())
			setPeerHeaders(pr.Out, u)
		},
		Transport:      currentTransport{p: p, longRunning: key.answer == answerStream},
		BufferPool:     &copyBuffers,
		ModifyResponse: modifyResponse(key.answer),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if tw, ok := w.(*trackingWriter); ok {
				tw.err = err
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	if p.proxiesCount.Add(1) > maxCachedProxies {
		p.proxies.Clear()
		p.proxiesCount.Store(1)
	}
	actual, _ := p.proxies.LoadOrStore(key, rp)
	return actual.(*httputil.ReverseProxy)
}

// upgradeDialErrorPrefix starts UpgradeAwareHandler's errors for a backend
// it could not connect to.
const upgradeDialErrorPrefix = "error dialing backend: "

// errorRecorder records UpgradeAwareHandler's error instead of writing it,
// so the caller can try another peer.
type errorRecorder struct{ tw *trackingWriter }

func (e errorRecorder) Error(_ http.ResponseWriter, _ *http.Request, err error) { e.tw.err = err }
