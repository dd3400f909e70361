// Package compute turns the engine's knowledge of the peers (their states
// and last good discovery documents) into the API objects served by
// peerdiscovery-apiserver. It is pure: no I/O, no clock, no goroutines; the
// same input gives deeply equal output on every replica.
package compute

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
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
	API         []apidiscoveryv2.APIGroupDiscovery
	APIs        []apidiscoveryv2.APIGroupDiscovery
	APIETag     string
	APIsETag    string
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
}

// ClusterWide sources.
const (
	SourceCRD        = "CustomResourceDefinition"
	SourceAPIService = "APIService"
)

// RouteName is the PeerRoutingTable name of a GVR: resource.version.group,
// with "core" for the legacy group. A GVR whose natural name is not a valid
// object name (a DNS subdomain of at most 253 characters) or could be read
// two ways (a resource or version with a dot, a group literally named
// "core") gets "gvr-" and a hash instead: peers' documents may list such
// names (merge.Validate admits any URL path segment as a resource), and the
// name must still be a unique, valid object name. Natural names always have
// two dots and hashed ones none, so they never collide.
func RouteName(gvr schema.GroupVersionResource) string {
	g := gvr.Group
	if g == "" {
		g = "core"
	}
	name := gvr.Resource + "." + gvr.Version + "." + g
	if gvr.Group != "core" && !strings.Contains(gvr.Resource, ".") && !strings.Contains(gvr.Version, ".") && isDNSSubdomain(name) {
		return name
	}
	return "gvr-" + hashName(gvr.Group, gvr.Version, gvr.Resource)
}

var peerNameReplacer = strings.NewReplacer(":", "-", "[", "", "]", "", "_", "-")

// PeerName is the APIServerPeer name of a server ID: IDs learned from
// EndpointSlices are addresses, which are not valid object names. An ID
// that still does not make a valid name (e.g. an IPv6 address starting
// with "::") gets "peer-" and a hash instead.
func PeerName(serverID string) string {
	name := strings.ToLower(peerNameReplacer.Replace(serverID))
	if isDNSSubdomain(name) {
		return name
	}
	return "peer-" + hashName(serverID)
}

// hashName is 32 hex digits of the SHA-256 of the parts.
func hashName(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// isDNSSubdomain is validation.IsDNS1123Subdomain without the regexp (it
// runs once per GVR on every recomputation).
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	start := true // at the start of a label
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			start = false
		case c == '-':
			if start || i == len(s)-1 || s[i+1] == '.' {
				return false
			}
		case c == '.':
			if start {
				return false
			}
			start = true
		default:
			return false
		}
	}
	return !start
}

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
		if p.Ready && !p.Left {
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
		apiDocs = append(apiDocs, merge.PeerDocument{ServerID: p.ServerID, Groups: p.API})
		apisDocs = append(apisDocs, merge.PeerDocument{ServerID: p.ServerID, Groups: p.APIs})
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

// routes builds one PeerRoutingTable per GVR any peer's document lists, and
// counts each peer's groups and resources on the way (one pass over the
// documents, which is most of the cost).
func routes(peers []*Peer, clusterWide map[schema.GroupVersion]string, ex func(string, string) bool) ([]v1alpha1.PeerRoutingTable, []peerCount) {
	type acc struct {
		gvr   schema.GroupVersionResource
		scope apidiscoveryv2.ResourceScope
		peers []v1alpha1.RoutingPeer
		// last is the index of the last peer added: a GVR listed twice by
		// one peer (in /api and /apis, or a duplicate) counts once.
		last int
	}
	hint := 0
	for _, p := range peers {
		if p.HasDocument {
			hint = max(hint, countResources(p.API)+countResources(p.APIs))
		}
	}
	hint += hint / 8
	index := make(map[schema.GroupVersionResource]int32, hint)
	accs := make([]acc, 0, hint)
	// One slab for every route's peers, len(peers) slots per GVR.
	var slab []v1alpha1.RoutingPeer
	counts := make([]peerCount, len(peers))
	groups := map[string]struct{}{}
	present := int32(0)
	for pi, p := range peers { // in ID order, so each route's peers are sorted
		if !p.Left {
			present++
		}
		if !p.HasDocument {
			continue
		}
		clear(groups)
		rp := v1alpha1.RoutingPeer{ServerID: p.ServerID, Endpoint: p.Endpoint, Ready: p.Ready && !p.Left, Left: p.Left}
		for _, doc := range [][]apidiscoveryv2.APIGroupDiscovery{p.API, p.APIs} {
			for gi := range doc {
				g := &doc[gi]
				for vi := range g.Versions {
					v := &g.Versions[vi]
					if excluded(ex, g.Name, v.Version) {
						continue
					}
					for ri := range v.Resources {
						r := &v.Resources[ri]
						gvr := schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}
						i, ok := index[gvr]
						if !ok {
							if len(slab) < len(peers) {
								slab = make([]v1alpha1.RoutingPeer, len(peers)*max(64, hint-len(accs)))
							}
							i = int32(len(accs))
							index[gvr] = i
							accs = append(accs, acc{gvr: gvr, scope: r.Scope, peers: slab[:0:len(peers)], last: -1})
							slab = slab[len(peers):]
						}
						a := &accs[i]
						if a.last == pi {
							continue
						}
						a.last = pi
						a.peers = append(a.peers, rp)
						counts[pi].resources++
						groups[g.Name] = struct{}{}
					}
				}
			}
		}
		counts[pi].groups = int32(len(groups))
	}
	out := make([]v1alpha1.PeerRoutingTable, len(accs))
	for i := range accs {
		a := &accs[i]
		t := &out[i]
		t.Name = RouteName(a.gvr)
		t.Spec = v1alpha1.PeerRoutingTableSpec{Group: a.gvr.Group, Version: a.gvr.Version, Resource: a.gvr.Resource, Scope: a.scope}
		t.Status = v1alpha1.PeerRoutingTableStatus{Peers: a.peers, TotalPeers: present}
		serving := int32(0)
		for _, p := range a.peers {
			if p.Ready {
				t.Status.ReadyPeers++
			}
			if !p.Left {
				serving++
			}
		}
		t.Status.ServedByAll = present > 0 && serving == present
		if src, ok := clusterWide[a.gvr.GroupVersion()]; ok {
			t.Status.ClusterWide, t.Status.ClusterWideSource = true, src
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, counts
}

func countResources(doc []apidiscoveryv2.APIGroupDiscovery) int {
	n := 0
	for gi := range doc {
		for vi := range doc[gi].Versions {
			n += len(doc[gi].Versions[vi].Resources)
		}
	}
	return n
}
