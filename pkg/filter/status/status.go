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

// Package status writes the answers the filter gives itself, not a peer:
// the Status of a 503 (with or without Retry-After), 502 and 504, and
// names the audit annotations it records on a request.
package status

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"strings"

	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
)

// Audit annotations on the source server's event, so that one request can
// be followed across servers (the peer's event has the same Audit-ID).
const (
	AuditDecision   = "peerdiscovery.k8s.io/decision"
	AuditProxiedTo  = "peerdiscovery.k8s.io/proxied-to"
	AuditFailedOver = "peerdiscovery.k8s.io/failed-over-from"
	AuditError      = "peerdiscovery.k8s.io/error"
	// AuditRouteSource is "registration-lease" on a request proxied by
	// what a peer's registration Lease records, no route naming it yet.
	AuditRouteSource = "peerdiscovery.k8s.io/route-source"
)

// Subject is what a request the filter proxies, or answers itself, is
// for: a resource, a group-version's documents (discovery, OpenAPI), or
// OpenAPI's root. It names the request in the Status answers and labels
// the metrics, whose labels come only from routing state (or fixed
// values), never from a client.
type Subject struct {
	// Labels are the metrics' group, version and resource.
	Labels metrics.Labels
	// details are the Status details' group and kind.
	details schema.GroupResource
	// statusVersion is the group-version a Status answer is encoded for.
	statusVersion schema.GroupVersion
	// name names it in messages.
	name string
}

// ResourceSubject is a resource request's Subject.
// Its name is made only when asked for (Name): a proxied request that
// succeeds never needs it.
func ResourceSubject(gvr schema.GroupVersionResource) Subject {
	return Subject{
		Labels:        metrics.Labels{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		details:       gvr.GroupResource(),
		statusVersion: gvr.GroupVersion(),
	}
}

// GroupVersionSubject is the Subject of a group-version's discovery or
// OpenAPI document (no resource).
func GroupVersionSubject(gv schema.GroupVersion) Subject {
	return Subject{
		Labels:        metrics.Labels{Group: gv.Group, Version: gv.Version},
		details:       schema.GroupResource{Group: gv.Group},
		statusVersion: gv,
		name:          gv.String(),
	}
}

// documentVersion encodes the Status answers about documents that belong
// to no group-version (discovery's root, OpenAPI's root): core v1, where
// metav1.Status is.
var documentVersion = schema.GroupVersion{Version: "v1"}

// OpenAPIRootSubject is the Subject of /openapi/v3, read from a peer.
var OpenAPIRootSubject = Subject{
	Labels:        metrics.OpenAPIRootLabels,
	statusVersion: documentVersion,
	name:          "the OpenAPI v3 root document",
}

// Name names the subject in messages and logs.
func (s Subject) Name() string {
	if s.name == "" {
		return s.details.String() // a resource (ResourceSubject)
	}
	return s.name
}

// DiscoverySubject names a discovery document in a 503's Status. Its 503
// is never counted as a proxy error: it has no metric labels.
var DiscoverySubject = Subject{
	statusVersion: documentVersion,
	name:          "discovery",
}

// Answers writes the Status answers the filter gives itself. It is
// configured once, from the aggregator's generic config (WrapHandler).
type Answers struct {
	Serializer runtime.NegotiatedSerializer
	// RetryAfter is the Retry-After, in seconds, of an answer whose cause
	// the next seconds likely fix.
	RetryAfter int
}

// Unavailable answers 503 with a Status body and Retry-After: peers serve
// it and the view lists one ready, but none could be connected to now,
// and none has seen it. Not a 404: it exists in the cluster.
func (a Answers) Unavailable(w http.ResponseWriter, r *http.Request, s Subject, why string) {
	a.peersUnavailable(w, r, s, why, a.RetryAfter)
}

// NoneReady answers 503 with a Status body and no Retry-After: every
// server that serves it is not ready or has left, so nothing says when it
// will answer again. client-go retries only a 5xx with Retry-After: its
// callers get the error at once, and a controller requeues with its own
// backoff instead of a worker waiting out an outage (docs/design.md,
// "Retry-After").
func (a Answers) NoneReady(w http.ResponseWriter, r *http.Request, s Subject, why string) {
	a.peersUnavailable(w, r, s, why, 0)
}

func (a Answers) peersUnavailable(w http.ResponseWriter, r *http.Request, s Subject, why string, retryAfter int) {
	metrics.ProxyError(r.Context(), metrics.ErrorUnavailable, s.Labels)
	metrics.RoutedAnswer(http.StatusServiceUnavailable)
	a.serviceUnavailable(w, r, s, fmt.Sprintf("%s is served by peer kube-apiservers that are unavailable: %s", s.Name(), why), retryAfter)
}

// RetryLater answers 503 with message, a Status body and Retry-After:
// what is missing (a sync, a view that catches up) comes within seconds.
func (a Answers) RetryLater(w http.ResponseWriter, r *http.Request, s Subject, message string) {
	a.serviceUnavailable(w, r, s, message, a.RetryAfter)
}

// serviceUnavailable answers 503 with message and a Status body, with
// Retry-After when retryAfter > 0.
func (a Answers) serviceUnavailable(w http.ResponseWriter, r *http.Request, s Subject, message string, retryAfter int) {
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: message,
		Details: &metav1.StatusDetails{Group: s.details.Group, Kind: s.details.Resource, RetryAfterSeconds: int32(retryAfter)},
	}}
	// ErrorNegotiated sets Retry-After from RetryAfterSeconds (none at 0).
	responsewriters.ErrorNegotiated(status, a.Serializer, s.statusVersion, w, r)
}

// SentButFailed answers a request that was sent to a peer which then failed
// to answer: 504 when it timed out, else 502. A read gets Retry-After (a
// client retry is safe); a write does not, so that no client replays a
// request the peer may have carried out. The message names the Subject,
// the decision and the peer; the network error itself goes to the log.
func (a Answers) SentButFailed(w http.ResponseWriter, r *http.Request, s Subject, peerID string, err error) {
	code, reason, what := http.StatusBadGateway, metav1.StatusReasonInternalError, "lost the connection before answering"
	if isTimeout(err) {
		code, reason, what = http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "did not answer in time"
	}
	msg := fmt.Sprintf("%s is served by peer kube-apiserver %s: the request was proxied to it, and it %s", s.Name(), peerID, what)
	var delay int32
	if r.Method == http.MethodGet || r.Method == http.MethodHead { // a read: retrying it changes nothing
		delay = int32(a.RetryAfter)
	} else {
		msg += "; it was not retried because the peer may have carried it out: check before repeating it"
	}
	audit.AddAuditAnnotation(r.Context(), AuditError, what)
	metrics.RoutedAnswer(code)
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(code),
		Reason:  reason,
		Message: msg,
		Details: &metav1.StatusDetails{Group: s.details.Group, Kind: s.details.Resource, RetryAfterSeconds: delay},
	}}
	responsewriters.ErrorNegotiated(status, a.Serializer, s.statusVersion, w, r)
}

// isTimeout is true for a response header timeout, a dial or TLS timeout,
// a deadline, a connection that failed its health check and a peer the
// view stopped: each time the peer did not answer.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || lostConnection(err)
}

// lostConnection is true for the error of a request whose HTTP/2
// connection failed its health check (a ping went unanswered): the peer
// stopped answering, which is a timeout, not a broken answer.
func lostConnection(err error) bool {
	// x/net/http2 (and net/http's bundled copy) close the connection with
	// this error when a ping times out; it has no type of its own.
	return err != nil && strings.Contains(err.Error(), "http2: client connection lost")
}
