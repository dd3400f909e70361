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

// Package peerdiscovery holds the REST storage of the peerdiscovery.k8s.io
// resources: read-only views over in-memory stores (Stores) that the peer
// engine fills through the Publisher, and the create-only RouteReview,
// decided on the Publisher's last view.
package peerdiscovery

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
)

// Category lets `kubectl get peerdiscovery` list every resource of the group.
const Category = "peerdiscovery"

// readOnlyREST serves get, list and watch from a memstore. It implements no
// write verb, so the generic endpoint installer answers 405 to writes.
type readOnlyREST struct {
	*memstore.Store
	rest.TableConvertor

	newFunc     func() runtime.Object
	newListFunc func() runtime.Object
	singular    string
	shortNames  []string
}

var (
	_ rest.Getter               = &readOnlyREST{}
	_ rest.Lister               = &readOnlyREST{}
	_ rest.Watcher              = &readOnlyREST{}
	_ rest.Scoper               = &readOnlyREST{}
	_ rest.SingularNameProvider = &readOnlyREST{}
	_ rest.ShortNamesProvider   = &readOnlyREST{}
	_ rest.CategoriesProvider   = &readOnlyREST{}
	_ rest.Storage              = &readOnlyREST{}
)

func (r *readOnlyREST) New() runtime.Object     { return r.newFunc() }
func (r *readOnlyREST) NewList() runtime.Object { return r.newListFunc() }

// Destroy is a no-op: the stores are stopped by their owner (Stores.Stop).
func (r *readOnlyREST) Destroy()                {}
func (r *readOnlyREST) NamespaceScoped() bool   { return false }
func (r *readOnlyREST) GetSingularName() string { return r.singular }
func (r *readOnlyREST) ShortNames() []string    { return r.shortNames }
func (r *readOnlyREST) Categories() []string    { return []string{Category} }

// Storage returns the REST storage of the group's v1alpha1 resources:
// the stores, and RouteReviews decided on view's last view.
func Storage(stores *Stores, view *Publisher) map[string]rest.Storage {
	return map[string]rest.Storage{
		"apiserverpeers": &readOnlyREST{
			Store: stores.Peers, TableConvertor: peerTable, singular: "apiserverpeer", shortNames: []string{"asp"},
			newFunc: func() runtime.Object { return &api.APIServerPeer{} }, newListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
		},
		"peeraggregateddiscoveries": &readOnlyREST{
			Store: stores.Discovery, TableConvertor: discoveryTable, singular: "peeraggregateddiscovery", shortNames: []string{"pad"},
			newFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, newListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
		},
		"peerroutingtables": &readOnlyREST{
			Store: stores.Routes, TableConvertor: routingTableTable(view), singular: "peerroutingtable", shortNames: []string{"prt"},
			newFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, newListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
		},
		"routereviews": &routeReviewREST{view: view},
	}
}
