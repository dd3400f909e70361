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
// Package filtertest holds the fixtures the filter's test packages share:
// discovery documents, routing tables and peers, and a fake apiserver's
// list and watch answers. Only tests import it.
package filtertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

// APIServerPeers are the APIServerPeers of every server the tables list,
// which carry readiness: ready but those in notReady, left where a table
// lists the server as left.
func APIServerPeers(tables []*v1alpha1.PeerRoutingTable, notReady ...string) []*v1alpha1.APIServerPeer {
	byID := map[string]*v1alpha1.APIServerPeer{}
	var out []*v1alpha1.APIServerPeer
	for _, t := range tables {
		for _, rp := range t.Status.Peers {
			p := byID[rp.ServerID]
			if p == nil {
				status := metav1.ConditionTrue
				if slices.Contains(notReady, rp.ServerID) {
					status = metav1.ConditionFalse
				}
				p = &v1alpha1.APIServerPeer{
					ObjectMeta: metav1.ObjectMeta{Name: rp.ServerID},
					Spec:       v1alpha1.APIServerPeerSpec{ServerID: rp.ServerID, Endpoint: rp.Endpoint},
					Status:     v1alpha1.APIServerPeerStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status}}},
				}
				byID[rp.ServerID] = p
				out = append(out, p)
			}
			if rp.Left {
				p.Status.LeftTime = &metav1.Time{}
			}
		}
	}
	return out
}

func DGroup(name, version string, resources ...string) apidiscoveryv2.APIGroupDiscovery {
	v := apidiscoveryv2.APIVersionDiscovery{Version: version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	for _, r := range resources {
		v.Resources = append(v.Resources, DRes(r))
	}
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: []apidiscoveryv2.APIVersionDiscovery{v}}
}

func DiscoveryJSON(groups ...apidiscoveryv2.APIGroupDiscovery) []byte {
	b, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{APIVersion: "apidiscovery.k8s.io/v2", Kind: "APIGroupDiscoveryList"},
		Items:    groups,
	})
	if err != nil {
		panic(err)
	}
	return b
}

func DRes(name string) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{
		Resource: name, Scope: apidiscoveryv2.ScopeNamespace, Verbs: []string{"get", "list", "watch"},
		ResponseKind: &metav1.GroupVersionKind{Kind: strings.ToUpper(name[:1]) + name[1:]},
	}
}

// Eventually polls cond until it holds; it fails the test after a long
// deadline that only a broken filter reaches.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// MergedDiscovery is the PeerAggregatedDiscovery peerdiscovery-apiserver
// serves: every peer's documents merged, with their ETags.
func MergedDiscovery(t *testing.T, rv string, api, apis []apidiscoveryv2.APIGroupDiscovery) *v1alpha1.PeerAggregatedDiscovery {
	t.Helper()
	apiETag, err := merge.ETag(api)
	if err != nil {
		t.Fatal(err)
	}
	apisETag, err := merge.ETag(apis)
	if err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.PeerAggregatedDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PeerAggregatedDiscoveryName, ResourceVersion: rv},
		Status: v1alpha1.PeerAggregatedDiscoveryStatus{
			API:  v1alpha1.DiscoveryDocument{ETag: apiETag, Items: api},
			APIs: v1alpha1.DiscoveryDocument{ETag: apisETag, Items: apis},
		},
	}
}

// ReadyPeer lists a server in a routing table; setRoutes makes it ready.
func ReadyPeer(id, endpoint string) v1alpha1.RoutingPeer {
	return v1alpha1.RoutingPeer{ServerID: id, Endpoint: endpoint}
}

// Route is the routing table of one GVR.
func Route(g schema.GroupVersionResource, peers ...v1alpha1.RoutingPeer) *v1alpha1.PeerRoutingTable {
	t := &v1alpha1.PeerRoutingTable{
		ObjectMeta: metav1.ObjectMeta{Name: g.Resource + "." + g.Version + "." + g.Group},
		Spec:       v1alpha1.PeerRoutingTableSpec{Group: g.Group, Version: g.Version, Resource: g.Resource},
	}
	t.Status.Peers = peers
	return t
}

func GVR(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

// ServeListOrWatchList answers a client-go informer as an apiserver would:
// a list with its items, or a watch that, when it is a watch-list, sends
// each item as ADDED and then the bookmark ending the initial events;
// the watch then stays open until the client leaves. kind is the list's
// item kind, items its JSON objects.
func ServeListOrWatchList(w http.ResponseWriter, r *http.Request, apiVersion, kind string, items ...string) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") != "true" {
		fmt.Fprintf(w, `{"kind":"%sList","apiVersion":%q,"metadata":{"resourceVersion":"1"},"items":[%s]}`, kind, apiVersion, strings.Join(items, ","))
		return
	}
	WriteInitialEvents(w, r, apiVersion, kind, items...)
	<-r.Context().Done()
}

// WriteInitialEvents starts a watch answer: for a watch-list, each item as
// ADDED and the bookmark ending the initial events; then a flush.
func WriteInitialEvents(w http.ResponseWriter, r *http.Request, apiVersion, kind string, items ...string) {
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		for _, item := range items {
			fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", item)
		}
		fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind, apiVersion)
	}
	w.(http.Flusher).Flush()
}
