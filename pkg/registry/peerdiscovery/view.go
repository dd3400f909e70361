package peerdiscovery

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/utils/clock"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// View is one complete computed state of the control plane, as the peer
// engine hands it over. Publishing a View replaces everything before it.
type View struct {
	Peers     []v1alpha1.APIServerPeer
	Discovery *v1alpha1.PeerAggregatedDiscovery
	Routes    []v1alpha1.PeerRoutingTable
}

// Publisher is the one narrow interface the peer engine calls. The engine
// publishes after every recomputation and at least once per refresh
// interval, even when nothing changed: that heartbeat is what keeps the
// server ready.
type Publisher interface {
	Publish(View) error
}

// ViewStore owns the in-memory stores of the three computed resources, all
// on one resourceVersion clock, and knows how fresh its content is.
type ViewStore struct {
	peers     *memstore.Store
	discovery *memstore.Store
	routes    *memstore.Store

	clock      clock.PassiveClock
	staleAfter time.Duration

	mu          sync.RWMutex
	lastPublish time.Time
	table       *routing.Table
}

var _ Publisher = &ViewStore{}

// NewViewStore makes empty stores. A view older than staleAfter makes the
// server unready.
func NewViewStore(staleAfter time.Duration, clk clock.PassiveClock) *ViewStore {
	rvClock := memstore.NewClock()
	v := &ViewStore{clock: clk, staleAfter: staleAfter}
	v.peers = memstore.New(memstore.Config{
		Resource: api.Resource("apiserverpeers"), Clock: rvClock, AttrFunc: peerAttrs,
		NewFunc: func() runtime.Object { return &api.APIServerPeer{} }, NewListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
	})
	v.discovery = memstore.New(memstore.Config{
		Resource: api.Resource("peeraggregateddiscoveries"), Clock: rvClock, AttrFunc: nameOnlyAttrs,
		NewFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, NewListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
	})
	v.routes = memstore.New(memstore.Config{
		Resource: api.Resource("peerroutingtables"), Clock: rvClock, AttrFunc: routingTableAttrs,
		NewFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, NewListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
	})
	return v
}

// Publish converts the view to internal objects and replaces each store's
// content; the stores emit watch events for what changed.
func (v *ViewStore) Publish(view View) error {
	peers := make([]runtime.Object, 0, len(view.Peers))
	for i := range view.Peers {
		out := &api.APIServerPeer{}
		if err := v1alpha1.Convert_v1alpha1_APIServerPeer_To_peerdiscovery_APIServerPeer(&view.Peers[i], out, nil); err != nil {
			return fmt.Errorf("converting APIServerPeer %q: %w", view.Peers[i].Name, err)
		}
		peers = append(peers, out)
	}
	routes := make([]runtime.Object, 0, len(view.Routes))
	for i := range view.Routes {
		out := &api.PeerRoutingTable{}
		if err := v1alpha1.Convert_v1alpha1_PeerRoutingTable_To_peerdiscovery_PeerRoutingTable(&view.Routes[i], out, nil); err != nil {
			return fmt.Errorf("converting PeerRoutingTable %q: %w", view.Routes[i].Name, err)
		}
		routes = append(routes, out)
	}
	var discovery []runtime.Object
	if view.Discovery != nil {
		out := &api.PeerAggregatedDiscovery{}
		if err := v1alpha1.Convert_v1alpha1_PeerAggregatedDiscovery_To_peerdiscovery_PeerAggregatedDiscovery(view.Discovery, out, nil); err != nil {
			return fmt.Errorf("converting PeerAggregatedDiscovery: %w", err)
		}
		discovery = append(discovery, out)
	}
	// Routes first, peers last: a watcher that sees a new peer can already
	// find the routes that name it.
	v.routes.Replace(routes)
	v.discovery.Replace(discovery)
	v.peers.Replace(peers)

	table := routing.NewTable(routingPointers(view.Routes), peerPointers(view.Peers))

	v.mu.Lock()
	v.table = table
	v.lastPublish = v.clock.Now()
	v.mu.Unlock()
	return nil
}

// lastPublished is when the last view was published (zero: never).
func (v *ViewStore) lastPublished() time.Time {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.lastPublish
}

// RoutingTable returns the decision table of the last published view and
// whether any view was published.
func (v *ViewStore) RoutingTable() (*routing.Table, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.table, !v.lastPublish.IsZero()
}

func routingPointers(routes []v1alpha1.PeerRoutingTable) []*v1alpha1.PeerRoutingTable {
	out := make([]*v1alpha1.PeerRoutingTable, len(routes))
	for i := range routes {
		out[i] = &routes[i]
	}
	return out
}

// ReadyzCheck fails until a first view was published and whenever the last
// one is older than staleAfter: a replica serving a frozen view must not
// receive traffic from the aggregator.
func (v *ViewStore) ReadyzCheck() healthz.HealthChecker {
	return healthz.NamedCheck("peerdiscovery-view", func(_ *http.Request) error {
		last := v.lastPublished()
		if last.IsZero() {
			return fmt.Errorf("no view computed yet")
		}
		if age := v.clock.Since(last); age > v.staleAfter {
			return fmt.Errorf("view is stale: last computed %s ago (limit %s)", age.Round(time.Second), v.staleAfter)
		}
		return nil
	})
}

// Stop ends every watch.
func (v *ViewStore) Stop() {
	v.peers.Stop()
	v.discovery.Stop()
	v.routes.Stop()
}

// Storage returns the REST storage of the group's v1alpha1 resources.
func (v *ViewStore) Storage() map[string]rest.Storage {
	return map[string]rest.Storage{
		"apiserverpeers": &readOnlyREST{
			Store: v.peers, TableConvertor: peerTable, singular: "apiserverpeer", shortNames: []string{"asp"},
			newFunc: func() runtime.Object { return &api.APIServerPeer{} }, newListFunc: func() runtime.Object { return &api.APIServerPeerList{} },
		},
		"peeraggregateddiscoveries": &readOnlyREST{
			Store: v.discovery, TableConvertor: discoveryTable, singular: "peeraggregateddiscovery", shortNames: []string{"pad"},
			newFunc: func() runtime.Object { return &api.PeerAggregatedDiscovery{} }, newListFunc: func() runtime.Object { return &api.PeerAggregatedDiscoveryList{} },
		},
		"peerroutingtables": &readOnlyREST{
			Store: v.routes, TableConvertor: routingTableTable, singular: "peerroutingtable", shortNames: []string{"prt"},
			newFunc: func() runtime.Object { return &api.PeerRoutingTable{} }, newListFunc: func() runtime.Object { return &api.PeerRoutingTableList{} },
		},
		"routereviews": &routeReviewREST{view: v},
	}
}

func peerPointers(peers []v1alpha1.APIServerPeer) []*v1alpha1.APIServerPeer {
	out := make([]*v1alpha1.APIServerPeer, len(peers))
	for i := range peers {
		out[i] = &peers[i]
	}
	return out
}
