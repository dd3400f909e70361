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

package routing

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	peer := func(id, reason string, left bool, ago time.Duration) *v1alpha1.APIServerPeer {
		p := &v1alpha1.APIServerPeer{Spec: v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: id + ":6443"}}
		p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
		if left {
			p.Status.LeftTime = &metav1.Time{Time: now.Add(-ago)}
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		peers []*v1alpha1.APIServerPeer
		want  bool
	}{
		{"timed out just now", []*v1alpha1.APIServerPeer{peer("a", "Timeout", false, 0)}, true},
		{"lapsed just inside the window", []*v1alpha1.APIServerPeer{peer("a", v1alpha1.PeerReasonLeft, true, RecoveryWindow-time.Second)}, true},
		{"lapsed a window ago", []*v1alpha1.APIServerPeer{peer("a", v1alpha1.PeerReasonLeft, true, RecoveryWindow)}, false},
		{"shut down just now", []*v1alpha1.APIServerPeer{peer("a", v1alpha1.PeerReasonShutDown, true, 0)}, false},
		{"one of two recovering", []*v1alpha1.APIServerPeer{peer("a", v1alpha1.PeerReasonShutDown, true, 0), peer("b", "Timeout", false, 3*time.Second)}, true},
		// Nothing listens where it was: crashed or killed, not back
		// within the window.
		{"refused just now", []*v1alpha1.APIServerPeer{peer("a", "ConnectionRefused", false, 0)}, false},
		{"refused, and another timed out", []*v1alpha1.APIServerPeer{peer("a", "ConnectionRefused", false, 0), peer("b", "Timeout", false, time.Second)}, true},
		{"only self recovering", []*v1alpha1.APIServerPeer{peer("self", "Timeout", false, 0), peer("b", v1alpha1.PeerReasonLeft, true, time.Minute)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &v1alpha1.PeerRoutingTable{Spec: v1alpha1.PeerRoutingTableSpec{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}}
			for _, p := range tc.peers {
				rt.Status.Peers = append(rt.Status.Peers, v1alpha1.RoutingPeer{ServerID: p.Spec.ServerID, Endpoint: p.Spec.Endpoint, Left: p.Status.LeftTime != nil})
			}
			res := Decide(&Snapshot{Table: NewTable([]*v1alpha1.PeerRoutingTable{rt}, tc.peers), Self: "self", Local: localSet{}}, Request{IsResourceRequest: true, GVR: gvr}, now)
			if res.Decision != v1alpha1.RouteUnavailable {
				t.Fatalf("decision %s, want Unavailable", res.Decision)
			}
			if got := res.RetryAfter; got != tc.want {
				t.Fatalf("RetryAfter = %v, want %v", got, tc.want)
			}
			// RouteReview says what the filter answers, the wait included
			// (from a source the table does not list: one it lists serves
			// the resource, in the review's eyes).
			if slices.ContainsFunc(tc.peers, func(p *v1alpha1.APIServerPeer) bool { return p.Spec.ServerID == "self" }) {
				return
			}
			why := res.Reason()
			st, err := reviewView(NewTable([]*v1alpha1.PeerRoutingTable{rt}, tc.peers), v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/example.com/v1/widgets", SourcePeer: "self"}, nil, now)
			if err != nil {
				t.Fatal(err)
			}
			if st.Decision != v1alpha1.RouteUnavailable || st.Reason != why || strings.Contains(why, RecoveringNote) != tc.want {
				t.Fatalf("review %s %q, filter's reason %q (wait %v)", st.Decision, st.Reason, why, tc.want)
			}
		})
	}
}
