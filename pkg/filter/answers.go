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
)

// unavailable answers 503 with a Status body and Retry-After: peers serve
// the resource but none can take the request now, and none has seen it.
// Not a 404: the resource exists in the cluster.
func unavailable(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, msg string, retryAfter int) {
	proxyError(r.Context(), "unavailable", gvr)
	retryLater(w, r, s, gvr, fmt.Sprintf("%s is served by peer kube-apiservers that are unavailable: %s", gvr.GroupResource().String(), msg), retryAfter)
}

// retryLater answers 503 with message, a Status body and Retry-After.
func retryLater(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, message string, retryAfter int) {
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: message,
		Details: &metav1.StatusDetails{Group: gvr.Group, Kind: gvr.Resource, RetryAfterSeconds: int32(retryAfter)},
	}}
	// ErrorNegotiated sets Retry-After from RetryAfterSeconds.
	responsewriters.ErrorNegotiated(status, s, gvr.GroupVersion(), w, r)
}

// sentButFailed answers a request that was sent to a peer which then failed
// to answer: 504 when it timed out, else 502. A read gets Retry-After (a
// client retry is safe); a write does not, so that no client replays a
// request the peer may have carried out. The message names the resource,
// the decision and the peer; the network error itself goes to the log.
func sentButFailed(w http.ResponseWriter, r *http.Request, s runtime.NegotiatedSerializer, gvr schema.GroupVersionResource, peerID string, err error, retryAfter int) {
	code, reason, what := http.StatusBadGateway, metav1.StatusReasonInternalError, "lost the connection before answering"
	if isTimeout(err) {
		code, reason, what = http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "did not answer in time"
	}
	msg := fmt.Sprintf("%s is served by peer kube-apiserver %s: the request was proxied to it, and it %s", gvr.GroupResource().String(), peerID, what)
	var delay int32
	if safeRead(r) {
		delay = int32(retryAfter)
	} else {
		msg += "; it was not retried because the peer may have carried it out: check before repeating it"
	}
	audit.AddAuditAnnotation(r.Context(), AuditError, what)
	status := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(code),
		Reason:  reason,
		Message: msg,
		Details: &metav1.StatusDetails{Group: gvr.Group, Kind: gvr.Resource, RetryAfterSeconds: delay},
	}}
	responsewriters.ErrorNegotiated(status, s, gvr.GroupVersion(), w, r)
}

// isTimeout is true for a response header timeout, a dial or TLS timeout,
// a deadline, a connection that failed its health check and a peer the
// view stopped: each time the peer did not answer.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || lostConnection(err)
}
