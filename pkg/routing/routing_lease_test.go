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
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// TestDecideByLease: a live server's registration Lease routes what the
// view cannot: a GVR no route names yet, and one whose routed servers the
// view last saw not ready while the Lease was renewed since (the view lags).
func TestDecideByLease(t *testing.T) {
	g := gvr("new.example.com", "v1", "gadgets")
	req := Request{IsResourceRequest: true, GVR: g}
	since := testNow.Add(-5 * time.Second)
	notReadySince := func(id string) *v1alpha1.APIServerPeer {
		p := peerObject(id, endpointOf(id), metav1.ConditionFalse, false)
		p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(since)
		return p
	}
	route := rt(g, withPeers(notReady("b")))
	routed := NewTable([]*v1alpha1.PeerRoutingTable{route}, []*v1alpha1.APIServerPeer{notReadySince("b")})
	// The view judged b gone: its Lease lapsed in the view's cache, or it
	// shut down.
	leftBy := func(reason string) *Table {
		p := notReadySince("b")
		p.Status.LeftTime = &p.Status.Conditions[0].LastTransitionTime
		p.Status.Conditions[0].Reason = reason
		return NewTable([]*v1alpha1.PeerRoutingTable{route}, []*v1alpha1.APIServerPeer{p})
	}
	lapsed, shutDown := leftBy(v1alpha1.PeerReasonLeft), leftBy(v1alpha1.PeerReasonShutDown)
	routedReady := newTable(rt(g, withPeers(ready("c"))))
	departed := record("b", testNow, g)
	departed.Departed, departed.DepartedAt = true, testNow.Add(-time.Second)
	for _, tc := range []struct {
		name    string
		s       Snapshot
		want    v1alpha1.RouteDecision
		why     why
		want1st []string
		retry   bool
	}{
		{"no route, two records", Snapshot{Table: newTable(), Records: Records{"b": record("b", testNow, g), "c": record("c", testNow, g), self: record(self, testNow, g)}},
			v1alpha1.RouteProxy, whyRecorded, expectedOrder(self, []string{"b", "c"}), false},
		{"no route, only self's record", Snapshot{Table: newTable(), Records: Records{self: record(self, testNow, g)}}, v1alpha1.RouteNotFound, whyUnknown, nil, false},
		{"no route, lapsed record", Snapshot{Table: newTable(), Records: Records{"b": record("b", testNow.Add(-time.Minute), g)}}, v1alpha1.RouteNotFound, whyUnknown, nil, false},
		{"no route, departed record", Snapshot{Table: newTable(), Records: Records{"b": departed}}, v1alpha1.RouteNotFound, whyUnknown, nil, false},
		{"no route, record of another GVR", Snapshot{Table: newTable(), Records: Records{"b": record("b", testNow, pods)}}, v1alpha1.RouteNotFound, whyUnknown, nil, false},
		{"not ready in a stale view, renewed since", Snapshot{Table: routed, ViewStale: true, Records: Records{"b": record("b", since.Add(time.Second), g)}}, v1alpha1.RouteProxy, whyVouched, []string{"b"}, false},
		{"not ready in a stale view, not renewed since", Snapshot{Table: routed, ViewStale: true, Records: Records{"b": record("b", since.Add(-time.Second), g)}}, v1alpha1.RouteUnavailable, whyNoneReady, nil, false},
		// A live view re-reads it every second: it cannot read it (a
		// partition, CPU starvation), and neither, likely, can this server.
		{"not ready in a live view, renewed since", Snapshot{Table: routed, Records: Records{"b": record("b", since.Add(time.Second), g)}}, v1alpha1.RouteUnavailable, whyNoneReady, nil, false},
		// The view's Lease watch was stuck (on a kube-apiserver that
		// restarted) while b renewed: this server's Lease is newer.
		{"lapsed in a live view, renewed since", Snapshot{Table: lapsed, Records: Records{"b": record("b", since.Add(time.Second), g)}}, v1alpha1.RouteProxy, whyVouched, []string{"b"}, false},
		{"lapsed in a live view, not renewed since", Snapshot{Table: lapsed, Records: Records{"b": record("b", since.Add(-time.Second), g)}}, v1alpha1.RouteUnavailable, whyNoneReady, nil, false},
		// A restart under the same identity: the view reads it again when
		// it rejoins.
		{"shut down in a live view, renewed since", Snapshot{Table: shutDown, Records: Records{"b": record("b", since.Add(time.Second), g)}}, v1alpha1.RouteUnavailable, whyNoneReady, nil, false},
		{"ready in the view first, then vouched", Snapshot{Table: routedReady, Records: Records{"d": record("d", testNow, g)}}, v1alpha1.RouteProxy, whyProxy, []string{"c", "d"}, false},
		{"unsynced, recorded", Snapshot{Records: Records{"b": record("b", testNow, g)}, SyncGraceUntil: testNow.Add(time.Second)}, v1alpha1.RouteProxy, whyRecorded, []string{"b"}, false},
		{"unsynced, in the grace", Snapshot{SyncGraceUntil: testNow.Add(time.Second)}, v1alpha1.RouteUnavailable, whyUnsynced, nil, true},
		{"unsynced, past the grace", Snapshot{SyncGraceUntil: testNow}, v1alpha1.RouteNotFound, whyUnsyncedChain, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.Self, s.Local = self, localSet{}
			res := Decide(&s, req, testNow)
			if res.Decision != tc.want || res.why != tc.why || !reflect.DeepEqual(ids(res.Candidates), tc.want1st) || res.RetryAfter != tc.retry {
				t.Fatalf("got %s (why %d) %v retry=%v: %q; want %s (why %d) %v retry=%v", res.Decision, res.why, ids(res.Candidates), res.RetryAfter, res.Reason(), tc.want, tc.why, tc.want1st, tc.retry)
			}
			if res.Decision == v1alpha1.RouteProxy && res.why != whyProxy && (!res.ByLease || !strings.Contains(res.Reason(), "registration Lease")) {
				t.Errorf("by lease %v, reason %q", res.ByLease, res.Reason())
			}
		})
	}
	// Nothing known of this server's own discovery: its chain answers.
	if res := Decide(&Snapshot{Self: self, Records: Records{"b": record("b", testNow, g)}}, req, testNow); res.Decision != v1alpha1.RouteLocal {
		t.Errorf("local unknown: %s, want Local", res.Decision)
	}
}

// TestStillCandidate: the check before each attempt agrees with Decide.
func TestStillCandidate(t *testing.T) {
	g := gvr("new.example.com", "v1", "gadgets")
	since := testNow.Add(-5 * time.Second)
	p := peerObject("b", endpointOf("b"), metav1.ConditionFalse, false)
	p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(since)
	table := NewTable([]*v1alpha1.PeerRoutingTable{rt(g, withPeers(notReady("b")))}, []*v1alpha1.APIServerPeer{p, peerObject("c", endpointOf("c"), metav1.ConditionTrue, false)})
	for _, tc := range []struct {
		name    string
		peer    string
		records Records
		want    bool
	}{
		{"ready in the view", "c", nil, true},
		{"known to neither", "x", nil, true},
		{"not ready, no record", "b", nil, false},
		{"not ready, renewed since, live view", "b", Records{"b": record("b", since.Add(time.Second), g)}, false},
		{"unknown to the view, live record", "y", Records{"y": record("y", testNow, g)}, true},
		{"unknown to the view, lapsed record", "y", Records{"y": record("y", testNow.Add(-time.Minute), g)}, false},
	} {
		s := &Snapshot{Self: self, Table: table, Records: tc.records, Local: localSet{}}
		if got := s.StillCandidate(Peer{ID: tc.peer}, g, testNow); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A stale view: the Lease renewed since it saw the server not ready
	// vouches; one from before does not.
	for renewed, want := range map[time.Duration]bool{time.Second: true, -time.Second: false} {
		s := &Snapshot{Self: self, Table: table, ViewStale: true, Records: Records{"b": record("b", since.Add(renewed), g)}, Local: localSet{}}
		if got := s.StillCandidate(Peer{ID: "b"}, g, testNow); got != want {
			t.Errorf("stale view, renewed %v after: %v, want %v", renewed, got, want)
		}
	}
}
