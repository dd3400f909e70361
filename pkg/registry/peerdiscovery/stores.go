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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
)

// Stores are the in-memory stores of the three computed resources. Only
// the Publisher writes them; the REST storage reads them.
type Stores struct {
	Peers     *memstore.Store
	Discovery *memstore.Store
	Routes    *memstore.Store
}

// peersResource is the resource APIServerPeers are stored under; their UID
// derives from it and the name.
var peersResource = api.Resource("apiserverpeers")

// NewStores makes the empty stores, each with its own random epoch of
// resourceVersions.
func NewStores() *Stores {
	return &Stores{
		Peers: memstore.New(memstore.Config{
			Resource: peersResource, AttrFunc: peerAttrs,
			NewFunc: func() runtime.Object { return &api.APIServerPeer{} }, NewListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
		}),
		Discovery: memstore.New(memstore.Config{
			Resource: api.Resource("peeraggregateddiscoveries"), AttrFunc: nameOnlyAttrs,
			NewFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, NewListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
		}),
		Routes: memstore.New(memstore.Config{
			Resource: api.Resource("peerroutingtables"), AttrFunc: routingTableAttrs,
			NewFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, NewListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
		}),
	}
}

// Stop ends every watch.
func (s *Stores) Stop() {
	s.Peers.Stop()
	s.Discovery.Stop()
	s.Routes.Stop()
}

// PeerUID is the UID the APIServerPeer of this name has in the store, the
// same on every replica: the peer engine's Events name it, so that kubectl
// describe finds them.
func PeerUID(name string) types.UID { return memstore.UID(peersResource, name) }
