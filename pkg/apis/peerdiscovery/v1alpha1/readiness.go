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

package v1alpha1

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PeerReady is the one readiness rule: requests may be proxied to a peer
// when it is reachable with fresh discovery and has not left. A peer that
// left stays listed (its tombstone) so its GVRs answer 503, but it is never
// ready. The engine's computation writes the Ready condition with it; the
// routing decision and the status.ready field selector read it back with
// PeerStatusReady.
func PeerReady(reachable, left bool) bool {
	return reachable && !left
}

// PeerStatusReady is PeerReady read from an APIServerPeer's status: its
// Ready condition is True and it has no LeftTime. It takes the two fields
// rather than the object so that the internal type can use it too.
func PeerStatusReady(conditions []metav1.Condition, leftTime *metav1.Time) bool {
	return PeerReady(apimeta.IsStatusConditionTrue(conditions, ConditionReady), leftTime != nil)
}

// Reasons of a peer's Ready condition when it has left (status.leftTime
// set). Routing tells them apart: a server that shut down is not expected
// back soon, one whose Lease lapsed may be restarting or paused.
const (
	// PeerReasonLeft: its registration Lease lapsed (crashed, frozen or
	// cut off) or was deleted.
	PeerReasonLeft = "Left"
	// PeerReasonShutDown: its registration Lease records a graceful
	// shutdown.
	PeerReasonShutDown = "ShutDown"
)
