// Copyright The peerdiscovery Authors.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//	http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.
package views

import (
	"maps"

	"k8s.io/client-go/tools/cache"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// The setters below are for tests only (the filter's, which put its views
// in a given state without informers); nothing else calls them. Each swaps
// in state as the informers would, and so publishes the snapshot.

// SetTable replaces the routing table. For tests only.
func (s *Routes) SetTable(t *routing.Table) { s.update(func(v *RoutesState) { v.Table = t }) }

// SetSynced marks the routing caches synced or not. For tests only.
func (s *Routes) SetSynced(synced bool) { s.update(func(v *RoutesState) { v.Synced = synced }) }

// SetMerged replaces the PeerAggregatedDiscovery. For tests only.
func (s *Routes) SetMerged(m *v1alpha1.PeerAggregatedDiscovery) {
	s.update(func(v *RoutesState) { v.Merged = m })
}

// SetStale marks the view's source down or up. For tests only.
func (s *Routes) SetStale(stale bool) { s.setSourceDown("", stale) }

// SetPeers makes peers the APIServerPeer informer PeerObject reads. For
// tests only.
func (s *Routes) SetPeers(peers cache.SharedIndexInformer) { s.peers = peers }

// SetRecords replaces the registration Leases' records. For tests only.
func (l *Leases) SetRecords(r routing.Records) {
	l.update(func(m routing.Records) {
		clear(m)
		maps.Copy(m, r)
	})
}

// ChangedForTest is where DiscoveryChanged asks for a read. For tests only.
func (l *Local) ChangedForTest() <-chan struct{} { return l.changed }
