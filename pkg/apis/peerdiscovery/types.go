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
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PeerSource says where a peer was learned from.
type PeerSource string

const (
	// PeerSourceRegistrationLease is the peerdiscovery registration Lease that
	// the filter publishes on every kube-apiserver that carries it.
	PeerSourceRegistrationLease PeerSource = "RegistrationLease"
	// PeerSourceIdentityLease is upstream's kube-apiserver identity Lease
	// carrying the kubernetes.io/peer-advertise-address annotation.
	PeerSourceIdentityLease PeerSource = "IdentityLease"
	// PeerSourceEndpointSlice is an address of the default/kubernetes Service.
	PeerSourceEndpointSlice PeerSource = "EndpointSlice"
)

// ConditionReady is the condition type that says whether a peer can be
// proxied to: it is reachable and its discovery is fresh.
const ConditionReady = "Ready"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// APIServerPeer is one kube-apiserver of the control plane, as seen by
// peerdiscovery: where it is reached, what it runs and whether its discovery
// could be read.
type APIServerPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   APIServerPeerSpec   `json:"spec,omitempty"`
	Status APIServerPeerStatus `json:"status,omitempty"`
}

// APIServerPeerSpec is what identifies a peer and how it is reached.
type APIServerPeerSpec struct {
	// ServerID is the kube-apiserver's identity (its identity Lease holder),
	// or its address when it was learned from an EndpointSlice only.
	ServerID string `json:"serverID"`
	// Endpoint is the host:port other servers use to reach it.
	Endpoint string `json:"endpoint"`
	// BinaryVersion is the kube-apiserver's version (gitVersion).
	// +optional
	BinaryVersion string `json:"binaryVersion,omitempty"`
	// Sources lists where the peer was learned from, sorted.
	// +listType=set
	Sources []PeerSource `json:"sources,omitempty"`
}

// APIServerPeerStatus is the observed state of a peer.
type APIServerPeerStatus struct {
	// Conditions holds Ready, with a reason and message when False.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastSyncTime is when its discovery was last read successfully.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// DiscoveryETag is the ETag of its last good /apis document.
	// +optional
	DiscoveryETag string `json:"discoveryETag,omitempty"`
	// Stale is true when the last good document is kept after failed reads.
	// +optional
	Stale bool `json:"stale,omitempty"`
	// GroupCount is the number of API groups it serves.
	GroupCount int32 `json:"groupCount"`
	// ResourceCount is the number of group/version/resources it serves.
	ResourceCount int32 `json:"resourceCount"`
	// LastError is the last failure reading the peer, empty when healthy.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// LeftTime is set when the peer left; it stays listed until its
	// tombstone expires so its APIs answer 503, not 404.
	// +optional
	LeftTime *metav1.Time `json:"leftTime,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// APIServerPeerList is a list of APIServerPeer.
type APIServerPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []APIServerPeer `json:"items"`
}

// PeerAggregatedDiscoveryName is the name of the singleton
// PeerAggregatedDiscovery object.
const PeerAggregatedDiscoveryName = "cluster"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PeerAggregatedDiscovery is the merged discovery of every peer, in
// apidiscovery.k8s.io/v2 shape. There is one, named "cluster".
type PeerAggregatedDiscovery struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status PeerAggregatedDiscoveryStatus `json:"status,omitempty"`
}

// PeerAggregatedDiscoveryStatus holds the merged documents.
type PeerAggregatedDiscoveryStatus struct {
	// API is the merged legacy (/api) document.
	API DiscoveryDocument `json:"api"`
	// APIs is the merged /apis document.
	APIs DiscoveryDocument `json:"apis"`
	// Sources lists the peers merged, in merge order (by server ID).
	// +listType=map
	// +listMapKey=serverID
	// +optional
	Sources []DiscoverySource `json:"sources,omitempty"`
}

// DiscoveryDocument is one merged discovery document and its ETag.
type DiscoveryDocument struct {
	// ETag is the hex SHA-512 of the JSON of Items, as upstream computes it.
	ETag string `json:"etag"`
	// Items are the merged groups.
	// +listType=atomic
	Items []apidiscoveryv2.APIGroupDiscovery `json:"items"`
}

// DiscoverySource is one peer's contribution to the merged view. The
// peer's own document ETag is on its APIServerPeer (status.discoveryETag),
// not here: a peer's document changing without changing the merged view
// must not rewrite (and resend to every watcher) this large object.
type DiscoverySource struct {
	ServerID string `json:"serverID"`
	// Stale is true when the peer's last good document was used.
	// +optional
	Stale bool `json:"stale,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PeerAggregatedDiscoveryList is a list of PeerAggregatedDiscovery.
type PeerAggregatedDiscoveryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PeerAggregatedDiscovery `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PeerRoutingTable says which peers serve one group/version/resource.
// Its name is resource.version.group ("pods.v1.core" for the core group).
type PeerRoutingTable struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PeerRoutingTableSpec   `json:"spec,omitempty"`
	Status PeerRoutingTableStatus `json:"status,omitempty"`
}

// PeerRoutingTableSpec names the GVR.
type PeerRoutingTableSpec struct {
	// Group is empty for the core group.
	// +optional
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	// Scope is Namespaced or Cluster.
	Scope apidiscoveryv2.ResourceScope `json:"scope"`
}

// PeerRoutingTableStatus says who serves the GVR.
type PeerRoutingTableStatus struct {
	// Peers are the servers that serve the GVR, sorted by server ID.
	// Whether each is ready is on its APIServerPeer (status.conditions):
	// one object per server, so a server turning not ready changes one
	// object, not every routing table that names it.
	// +listType=map
	// +listMapKey=serverID
	// +optional
	Peers []RoutingPeer `json:"peers,omitempty"`
	// TotalPeers counts every known peer, serving the GVR or not.
	TotalPeers int32 `json:"totalPeers"`
	// ServedByAll is true when every known peer serves the GVR, so no
	// request for it is ever proxied.
	ServedByAll bool `json:"servedByAll"`
	// ClusterWide is true for a CRD or an aggregated APIService: every
	// server serves it, so it is never proxied.
	ClusterWide bool `json:"clusterWide"`
	// ClusterWideSource is CustomResourceDefinition or APIService.
	// +optional
	ClusterWideSource string `json:"clusterWideSource,omitempty"`
}

// RoutingPeer is one server that serves a GVR.
type RoutingPeer struct {
	ServerID string `json:"serverID"`
	Endpoint string `json:"endpoint"`
	// Left is true when the peer has left and is kept until its tombstone
	// expires (its GVRs answer 503, not 404).
	// +optional
	Left bool `json:"left,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PeerRoutingTableList is a list of PeerRoutingTable.
type PeerRoutingTableList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PeerRoutingTable `json:"items"`
}

// RouteDecision is what the filter does with a request.
type RouteDecision string

const (
	// RouteLocal serves the request on the receiving server.
	RouteLocal RouteDecision = "Local"
	// RouteProxy sends the request to a peer.
	RouteProxy RouteDecision = "Proxy"
	// RouteNotFound passes the request to the local chain, which answers 404:
	// no peer knows the resource.
	RouteNotFound RouteDecision = "NotFound"
	// RouteUnavailable answers 503 with Retry-After: peers serve the resource
	// but none can be reached now.
	RouteUnavailable RouteDecision = "Unavailable"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RouteReview asks what the filter would do with a request, and why.
// Like SubjectAccessReview it is create-only and never stored.
//
// The answer is the filter's own decision (routing.Decide, or
// routing.DecideGroupVersion for a group-version's resource list) on the
// routing tables, APIServerPeers and registration Leases of the last
// published view, for the request as kube-apiserver parses it. What the
// filter decides from but the API does not show is listed in
// status.assumptions: the source's sync state, its live discovery (the
// review takes what peerdiscovery last read of it), its own Lease watch,
// whether it runs the filter, and whether peers can be reached at request
// time. An invalid spec or an unknown sourcePeer is 422 Invalid; no view
// yet, or no peer known yet, is 503 with Retry-After.
type RouteReview struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RouteReviewSpec `json:"spec"`
	// +optional
	Status RouteReviewStatus `json:"status,omitempty"`
}

// RouteReviewSpec is the request to explain.
type RouteReviewSpec struct {
	// Verb is a Kubernetes request verb (get, list, watch, create, update,
	// patch, delete, deletecollection) or an HTTP method (GET, HEAD, POST,
	// PUT, PATCH, DELETE). The filter routes every verb of a resource
	// alike; the verb is checked, not decided on.
	Verb string `json:"verb"`
	// Path is the request path with an optional query, e.g.
	// /apis/apps/v1/namespaces/x/deployments; at most 4096 bytes.
	Path string `json:"path"`
	// SourcePeer is the server ID (an APIServerPeer's spec.serverID) that
	// receives the request; it must name a known peer. Empty means a server
	// that serves nothing but what every peer serves.
	// +optional
	SourcePeer string `json:"sourcePeer,omitempty"`
	// PeerProxied says the request carries X-Kubernetes-Peer-Proxied: true,
	// as one a peer already proxied does: the filter serves it locally and
	// never proxies it again.
	// +optional
	PeerProxied bool `json:"peerProxied,omitempty"`
}

// RouteReviewStatus is the answer.
type RouteReviewStatus struct {
	Decision RouteDecision `json:"decision"`
	// Target is the server ID the request would be proxied to.
	// +optional
	Target string `json:"target,omitempty"`
	// TargetEndpoint is Target's host:port.
	// +optional
	TargetEndpoint string `json:"targetEndpoint,omitempty"`
	// Candidates are the peers other than the source that the routing
	// table lists for the resource, in the order the source's filter tries
	// them (its preference order): for Proxy only the ready ones, exactly
	// those tried; for Unavailable every one listed, with its state (none is
	// tried: none is ready); for a cluster-wide resource (Local) every one
	// listed (none is tried: every server serves it). Empty when no routing
	// table was consulted (served by the source itself, a non-resource or
	// an already proxied request, no table: NotFound).
	// +listType=atomic
	// +optional
	Candidates []RouteCandidate `json:"candidates,omitempty"`
	// Group, Version and Resource are parsed from the path; empty for a
	// non-resource request.
	// +optional
	Group string `json:"group,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Resource string `json:"resource,omitempty"`
	// Reason explains the decision.
	Reason string `json:"reason"`
	// Assumptions name the inputs of the filter's decision that the review
	// cannot read from the API, each with what the review assumed instead:
	// whether the source's filter has synced its routing state (before it
	// has, within its sync grace period after start, a resource it does not
	// serve and no live server's Lease records gets 503), the source's own
	// discovery (the review takes the GVRs the routing tables list it for,
	// as last read by peerdiscovery), whether the source runs the filter at
	// all, for a resource no route names whether a live server's
	// registration Lease records it (the source's filter reads the Leases
	// itself and proxies to that server then), and
	// whether a candidate can be reached at request time. The decision
	// holds when they do.
	// +listType=atomic
	// +optional
	Assumptions []string `json:"assumptions,omitempty"`
}

// RouteCandidate is a peer the review considered, with its state when the
// review was decided (a review is never stored).
type RouteCandidate struct {
	ServerID string `json:"serverID"`
	Endpoint string `json:"endpoint"`
	// Ready is true when requests may be proxied to it (its APIServerPeer's
	// Ready condition).
	Ready bool `json:"ready"`
	// Left is true when the peer has left and is kept until its tombstone
	// expires.
	// +optional
	Left bool `json:"left,omitempty"`
}
