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

package filter

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

	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
)

// subject is what a request the filter proxies, or answers itself, is
// for: a resource, a group-version's documents (discovery, OpenAPI), or
// OpenAPI's root. It names the request in the Status answers and labels
// the metrics, whose labels come only from routing state (or fixed
// values), never from a client.
type subject struct {
	// labels are the metrics' group, version and resource.
	labels metrics.Labels
	// details are the Status details' group and kind.
	details schema.GroupResource
	// statusVersion is the group-version a Status answer is encoded for.
	statusVersion schema.GroupVersion
	// name names it in messages.
	name string
}

// resourceSubject is a resource request's subject.
func resourceSubject(gvr schema.GroupVersionResource) subject {
	return subject{labels: metrics.ResourceLabels(gvr), details: gvr.GroupResource(), statusVersion: gvr.GroupVersion(), name: gvr.GroupResource().String()}
}

// groupVersionSubject is the subject of a group-version's discovery or
// OpenAPI document (no resource).
func groupVersionSubject(gv schema.GroupVersion) subject {
	return subject{labels: metrics.GroupVersionLabels(gv), details: schema.GroupResource{Group: gv.Group}, statusVersion: gv, name: gv.String()}
}

// documentVersion encodes the Status answers about documents that belong
// to no group-version (discovery's root, OpenAPI's root): core v1, where
// metav1.Status is.
var documentVersion = schema.GroupVersion{Version: "v1"}

// openAPIRootSubject is the subject of /openapi/v3, read from a peer.
var openAPIRootSubject = subject{
	labels:        metrics.OpenAPIRootLabels,
	statusVersion: documentVersion,
	name:          "the OpenAPI v3 root document",
}

// answers writes the Status answers the filter gives itself. It is
// configured once, from the aggregator's generic config (WrapHandler).
type answers struct {
	serializer runtime.NegotiatedSerializer
	retryAfter int
}

// unavailable answers 503 with a Status body and Retry-After: peers serve
// it and the view lists one ready, but none could be connected to now,
// and none has seen it. Not a 404: it exists in the cluster.
func (a answers) unavailable(w http.ResponseWriter, r *http.Request, s subject, why string) {
	a.peersUnavailable(w, r, s, why, a.retryAfter)
}

// noneReady answers 503 with a Status body and no Retry-After: every
// server that serves it is not ready or has left, so nothing says when it
// will answer again. client-go retries only a 5xx with Retry-After: its
// callers get the error at once, and a controller requeues with its own
// backoff instead of a worker waiting out an outage (docs/design.md,
// "Retry-After").
func (a answers) noneReady(w http.ResponseWriter, r *http.Request, s subject, why string) {
	a.peersUnavailable(w, r, s, why, 0)
}

func (a answers) peersUnavailable(w http.ResponseWriter, r *http.Request, s subject, why string, retryAfter int) {
	metrics.ProxyError(r.Context(), metrics.ErrorUnavailable, s.labels)
	metrics.RoutedAnswer(http.StatusServiceUnavailable)
	a.serviceUnavailable(w, r, s, fmt.Sprintf("%s is served by peer kube-apiservers that are unavailable: %s", s.name, why), retryAfter)
}

// retryLater answers 503 with message, a Status body and Retry-After:
// what is missing (a sync, a view that catches up) comes within seconds.
func (a answers) retryLater(w http.ResponseWriter, r *http.Request, s subject, message string) {
	a.serviceUnavailable(w, r, s, message, a.retryAfter)
}

// serviceUnavailable answers 503 with message and a Status body, with
// Retry-After when retryAfter > 0.
func (a answers) serviceUnavailable(w http.ResponseWriter, r *http.Request, s subject, message string, retryAfter int) {
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: message,
		Details: &metav1.StatusDetails{Group: s.details.Group, Kind: s.details.Resource, RetryAfterSeconds: int32(retryAfter)},
	}}
	// ErrorNegotiated sets Retry-After from RetryAfterSeconds (none at 0).
	responsewriters.ErrorNegotiated(status, a.serializer, s.statusVersion, w, r)
}

// sentButFailed answers a request that was sent to a peer which then failed
// to answer: 504 when it timed out, else 502. A read gets Retry-After (a
// client retry is safe); a write does not, so that no client replays a
// request the peer may have carried out. The message names the subject,
// the decision and the peer; the network error itself goes to the log.
func (a answers) sentButFailed(w http.ResponseWriter, r *http.Request, s subject, peerID string, err error) {
	code, reason, what := http.StatusBadGateway, metav1.StatusReasonInternalError, "lost the connection before answering"
	if isTimeout(err) {
		code, reason, what = http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "did not answer in time"
	}
	msg := fmt.Sprintf("%s is served by peer kube-apiserver %s: the request was proxied to it, and it %s", s.name, peerID, what)
	var delay int32
	if safeRead(r) {
		delay = int32(a.retryAfter)
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
	responsewriters.ErrorNegotiated(status, a.serializer, s.statusVersion, w, r)
}

// isTimeout is true for a response header timeout, a dial or TLS timeout,
// a deadline, a connection that failed its health check and a peer the
// view stopped: each time the peer did not answer.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || lostConnection(err)
}
