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

package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// logRoutingEvidence logs what decides whether the old server's discovery
// lists PDBs while their only server is down: each registration Lease's
// record of what its server serves, and policy/v1 in the old server's
// discovery now.
func logRoutingEvidence(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	leases, err := kube(t, old).CoordinationV1().Leases(peerlease.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing Leases: %v", err)
	}
	for _, l := range leases.Items {
		switch {
		case peerlease.IsRegistration(&l):
			t.Logf("Lease %s: renewed %v", l.Name, l.Spec.RenewTime)
		case peerlease.IsServedRecord(&l):
			rec, err := peerlease.ParseServedRecord(&l)
			pdbs := false
			for _, r := range rec.Served {
				pdbs = pdbs || r.Resource == "poddisruptionbudgets"
			}
			t.Logf("Lease %s: served record of %d resources (err %v), PDBs among them: %v", l.Name, len(rec.Served), err, pdbs)
		}
	}
	// As the namespace controller asks: aggregated discovery, preferred
	// versions, namespaced resources.
	rls, err := kube(t, old).Discovery().ServerPreferredNamespacedResources()
	pdbs := false
	for _, rl := range rls {
		for _, r := range rl.APIResources {
			pdbs = pdbs || (rl.GroupVersion == "policy/v1" && r.Name == "poddisruptionbudgets")
		}
	}
	t.Logf("the old server's preferred namespaced resources: %d group-versions, PDBs among them: %v, err=%v", len(rls), pdbs, err)
	pd, err := versioned.NewForConfig(cluster.AdminConfig(old))
	if err != nil {
		t.Logf("peerdiscovery client: %v", err)
		return
	}
	peers, err := pd.PeerdiscoveryV1alpha1().APIServerPeers().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing APIServerPeers: %v", err)
	} else {
		for _, p := range peers.Items {
			t.Logf("APIServerPeer %s (%s): ready %v, left %v, conditions %s", p.Name, p.Spec.ServerID, v1alpha1.PeerStatusReady(p.Status.Conditions, p.Status.LeftTime), p.Status.LeftTime != nil, peerConditions(p.Status.Conditions))
		}
	}
	merged, err := pd.PeerdiscoveryV1alpha1().PeerAggregatedDiscoveries().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing PeerAggregatedDiscoveries: %v", err)
		return
	}
	for _, m := range merged.Items {
		var policy []string
		for _, g := range m.Status.APIs.Items {
			if g.Name == "policy" {
				for _, v := range g.Versions {
					policy = append(policy, fmt.Sprintf("%s(%s, %d resources)", v.Version, v.Freshness, len(v.Resources)))
				}
			}
		}
		t.Logf("PeerAggregatedDiscovery %s rv %s: sources %+v; policy: %v", m.Name, m.ResourceVersion, m.Status.Sources, policy)
	}
}

func peerConditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(out, ",")
}
