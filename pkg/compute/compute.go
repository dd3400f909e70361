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

// Package compute turns the engine's knowledge of the peers (their states
// and last good discovery documents) into the API objects served by
// peerdiscovery-apiserver. It is pure: no I/O, no clock, no goroutines; the
// same input gives deeply equal output on every replica.
package compute

import (
	"fmt"
	"sort"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/clusterwide"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// Peer is everything the engine knows about one kube-apiserver.
type Peer struct {
	ServerID      string
	Endpoint      string
	BinaryVersion string
	Sources       []v1alpha1.PeerSource

	// Ready: reachable, and its discovery was read in the last refresh.
	Ready           bool
	ReadyReason     string
	ReadyMessage    string
	ReadyTransition time.Time
	LastSyncTime    time.Time
	LastError       string
	Stale           bool

	// Left is set once the peer's lease lapsed or was deleted; it is kept
	// (tombstoned) so its GVRs answer 503 rather than 404.
	Left     bool
	LeftTime time.Time

	// API and APIs are its last good /api and /apis documents; HasDocument
	// is false until one was read.
	HasDocument bool
	// Recorded: the documents are the resource list its registration
	// Lease records (this replica never read the peer), not a read: they
	// merge after every read document, so that a read server's full
	// resource entries (kind, verbs, subresources) win.
	Recorded bool
	API      []apidiscoveryv2.APIGroupDiscovery
	APIs     []apidiscoveryv2.APIGroupDiscovery
	APIETag  string
	APIsETag string
}

// Input is one complete state.
type Input struct {
	Peers []Peer
	// ClusterWide maps group-versions served by every server (CRDs and
	// APIServices with a service) to their source kind.
	ClusterWide map[schema.GroupVersion]string
	// Excluded drops group-versions everywhere: a deleted CRD's GV must never
	// come back from a peer's stale document.
	Excluded func(group, version string) bool
}

// Output is the computed objects.
type Output struct {
	Peers     []v1alpha1.APIServerPeer
	Discovery *v1alpha1.PeerAggregatedDiscovery
	Routes    []v1alpha1.PeerRoutingTable
	// Records are the registration Leases the view was computed from, as
	// routing decisions read them (set by the engine, not computed): what
	// RouteReview decides on beside the routes.
	Records routing.Records
}

// ClusterWide sources: pkg/clusterwide owns the rule.
const (
	SourceCRD        = clusterwide.SourceCRD
	SourceAPIService = clusterwide.SourceAPIService
)

// Compute builds every object from one state.
func Compute(in Input) (Output, error) {
	peers := make([]*Peer, len(in.Peers))
	for i := range in.Peers {
		peers[i] = &in.Peers[i]
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ServerID < peers[j].ServerID })

	disc, err := discovery(peers, in.Excluded)
	if err != nil {
		return Output{}, err
	}
	routes, counts := routes(peers, in.ClusterWide, in.Excluded)
	return Output{
		Peers:     peerObjects(peers, counts),
		Discovery: disc,
		Routes:    routes,
	}, nil
}

func excluded(ex func(string, string) bool, g, v string) bool { return ex != nil && ex(g, v) }

// peerCount is what one peer's documents list, excluded GVs left out.
type peerCount struct{ groups, resources int32 }

func peerObjects(peers []*Peer, counts []peerCount) []v1alpha1.APIServerPeer {
	out := make([]v1alpha1.APIServerPeer, 0, len(peers))
	for i, p := range peers {
		obj := v1alpha1.APIServerPeer{
			ObjectMeta: metav1.ObjectMeta{Name: PeerName(p.ServerID)},
			Spec: v1alpha1.APIServerPeerSpec{
				ServerID: p.ServerID, Endpoint: p.Endpoint, BinaryVersion: p.BinaryVersion,
				Sources: append([]v1alpha1.PeerSource(nil), p.Sources...),
			},
			Status: v1alpha1.APIServerPeerStatus{
				DiscoveryETag: p.APIsETag,
				Stale:         p.Stale,
				LastError:     p.LastError,
				GroupCount:    counts[i].groups,
				ResourceCount: counts[i].resources,
			},
		}
		sort.Slice(obj.Spec.Sources, func(i, j int) bool { return obj.Spec.Sources[i] < obj.Spec.Sources[j] })
		status, reason, msg := metav1.ConditionFalse, p.ReadyReason, p.ReadyMessage
		if v1alpha1.PeerReady(p.Ready, p.Left) {
			status = metav1.ConditionTrue
		}
		if reason == "" {
			reason = "Unknown"
		}
		obj.Status.Conditions = []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg,
			LastTransitionTime: metav1.NewTime(p.ReadyTransition),
		}}
		if !p.LastSyncTime.IsZero() {
			t := metav1.NewTime(p.LastSyncTime)
			obj.Status.LastSyncTime = &t
		}
		if p.Left {
			t := metav1.NewTime(p.LeftTime)
			obj.Status.LeftTime = &t
		}
		out = append(out, obj)
	}
	return out
}

// recordedMergePrefix sorts a recorded document's merge ID after any
// server ID (those are DNS labels and the like: printable ASCII).
const recordedMergePrefix = "\xff"

func discovery(peers []*Peer, ex func(string, string) bool) (*v1alpha1.PeerAggregatedDiscovery, error) {
	var apiDocs, apisDocs []merge.PeerDocument
	sources := []v1alpha1.DiscoverySource{}
	for _, p := range peers {
		// A peer that left stays in the merged view, stale, while its
		// tombstone lasts (it is dropped from peers when that ends), as a
		// stale peer's last good document does: the namespace controller
		// and the garbage collector act on what discovery lists, and a GVR
		// that vanished from it would let them delete a namespace (or a
		// dependent) while its objects are only unreachable; listed, its
		// requests answer 503 and they wait.
		if !p.HasDocument {
			continue
		}
		// The first document in ID order gives a resource's kind; clients
		// (client-go's aggregated discovery among them) drop a resource
		// without one, so a recorded list must never come first: merged
		// under an ID that sorts after any server's, its entries only add
		// what no read document has.
		mergeID := p.ServerID
		if p.Recorded {
			mergeID = recordedMergePrefix + p.ServerID
		}
		apiDocs = append(apiDocs, merge.PeerDocument{ServerID: mergeID, Groups: p.API})
		apisDocs = append(apisDocs, merge.PeerDocument{ServerID: mergeID, Groups: p.APIs})
		sources = append(sources, v1alpha1.DiscoverySource{ServerID: p.ServerID, Stale: p.Stale || p.Left})
	}
	api := merge.Merge(apiDocs, ex)
	apis := merge.Merge(apisDocs, ex)
	apiETag, err := merge.ETag(api)
	if err != nil {
		return nil, fmt.Errorf("hashing merged /api: %w", err)
	}
	apisETag, err := merge.ETag(apis)
	if err != nil {
		return nil, fmt.Errorf("hashing merged /apis: %w", err)
	}
	return &v1alpha1.PeerAggregatedDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PeerAggregatedDiscoveryName},
		Status: v1alpha1.PeerAggregatedDiscoveryStatus{
			API:     v1alpha1.DiscoveryDocument{ETag: apiETag, Items: api},
			APIs:    v1alpha1.DiscoveryDocument{ETag: apisETag, Items: apis},
			Sources: sources,
		},
	}, nil
}
