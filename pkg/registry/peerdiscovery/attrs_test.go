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

package peerdiscovery

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/install"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// TestAttrsMatchFieldLabels: every field the registry sets is a label the
// API accepts, and the other way round.
func TestAttrsMatchFieldLabels(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	for _, tc := range []struct {
		kind  string
		attrs func(runtime.Object) (labels.Set, fields.Set, error)
		obj   runtime.Object
	}{
		{"PeerRoutingTable", routingTableAttrs, &api.PeerRoutingTable{}},
		{"APIServerPeer", peerAttrs, &api.APIServerPeer{}},
		{"PeerAggregatedDiscovery", nameOnlyAttrs, &api.PeerAggregatedDiscovery{}},
	} {
		_, set, err := tc.attrs(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		gvk := v1alpha1.SchemeGroupVersion.WithKind(tc.kind)
		for label := range set {
			if _, _, err := scheme.ConvertFieldLabel(gvk, label, "x"); err != nil {
				t.Errorf("%s: the registry sets %s, the API rejects it: %v", tc.kind, label, err)
			}
		}
		for _, label := range []string{"metadata.name", "spec.group", "spec.serverID", "status.ready", "status.servedByAll", "spec.nothing"} {
			_, _, err := scheme.ConvertFieldLabel(gvk, label, "x")
			if _, set := set[label]; (err == nil) != set {
				t.Errorf("%s: the API accepts %s: %v, the registry sets it: %v", tc.kind, label, err == nil, set)
			}
		}
	}
}

// TestPeerStatusReadyField: status.ready is the readiness rule routing uses,
// so a peer that left is not ready even if its last Ready condition is True.
func TestPeerStatusReadyField(t *testing.T) {
	ready := []metav1.Condition{{Type: api.ConditionReady, Status: metav1.ConditionTrue}}
	left := metav1.Now()
	for _, tc := range []struct {
		name string
		p    api.APIServerPeer
		want string
	}{
		{"ready", api.APIServerPeer{Status: api.APIServerPeerStatus{Conditions: ready}}, "true"},
		{"not ready", api.APIServerPeer{}, "false"},
		{"left", api.APIServerPeer{Status: api.APIServerPeerStatus{Conditions: ready, LeftTime: &left}}, "false"},
	} {
		_, set, err := peerAttrs(&tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := set["status.ready"]; got != tc.want {
			t.Errorf("%s: status.ready=%s, want %s", tc.name, got, tc.want)
		}
	}
}
