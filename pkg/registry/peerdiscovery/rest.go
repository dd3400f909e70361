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
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
)

// Category lets `kubectl get peerdiscovery` list every resource of the group.
const Category = "peerdiscovery"

// readOnlyREST serves get, list and watch from a memstore. It implements no
// write verb, so the generic endpoint installer answers 405 to writes.
//
// Until the replica published its first view, every read is a 503: an
// empty list then would be a false answer, and a filter that relists
// from a replica just restarted at an address still in the Service's
// endpoints (a crash, before its readiness failed) would replace every
// route it holds with nothing and answer 404 for what its peers serve.
// On an error, a reflector keeps what it holds and retries.
type readOnlyREST struct {
	*memstore.Store
	rest.TableConvertor
	published func() bool

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

// errNoView is the answer to reads before the first view.
var errNoView = apierrors.NewServiceUnavailable("this peerdiscovery-apiserver replica has not computed its first view yet")

func (r *readOnlyREST) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	if !r.published() {
		return nil, errNoView
	}
	return r.Store.Get(ctx, name, opts)
}

func (r *readOnlyREST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if !r.published() {
		return nil, errNoView
	}
	return r.Store.List(ctx, opts)
}

func (r *readOnlyREST) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	if !r.published() {
		return nil, errNoView
	}
	return r.Store.Watch(ctx, opts)
}

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
	published := func() bool { return !view.LastPublished().IsZero() }
	return map[string]rest.Storage{
		"apiserverpeers": &readOnlyREST{
			published: published, Store: stores.Peers, TableConvertor: peerTable, singular: "apiserverpeer", shortNames: []string{"asp"},
			newFunc: func() runtime.Object { return &api.APIServerPeer{} }, newListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
		},
		"peeraggregateddiscoveries": &readOnlyREST{
			published: published, Store: stores.Discovery, TableConvertor: discoveryTable, singular: "peeraggregateddiscovery", shortNames: []string{"pad"},
			newFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, newListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
		},
		"peerroutingtables": &readOnlyREST{
			published: published, Store: stores.Routes, TableConvertor: routingTableTable(view), singular: "peerroutingtable", shortNames: []string{"prt"},
			newFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, newListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
		},
		"routereviews": &routeReviewREST{view: view},
	}
}
