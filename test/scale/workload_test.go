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

package scale

import (
	"fmt"
	"slices"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/discoverydocs"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// workload is the engine's input, changed one step at a time.
type workload struct {
	in       compute.Input
	crds     []string // CRD groups currently served
	next     int      // next CRD number
	etagPeer int      // the peer of the last ETag-only change
}

func newWorkload() *workload {
	w := &workload{in: compute.Input{ClusterWide: map[schema.GroupVersion]string{}}}
	for _, s := range discoverydocs.Servers(7, peers, 100, gvrsPerPeer) {
		w.in.Peers = append(w.in.Peers, compute.Peer{
			ServerID: s.ID, Endpoint: s.ID + ".example:6443", BinaryVersion: "v1.37.2",
			Sources: []v1alpha1.PeerSource{v1alpha1.PeerSourceRegistrationLease},
			Ready:   true, ReadyReason: "DiscoverySynced", ReadyTransition: t0, LastSyncTime: t0,
			HasDocument: true, APIs: s.Groups, APIETag: `"api-0"`, APIsETag: `"apis-0"`,
		})
	}
	return w
}

type change int

const (
	etagOnly change = iota
	crdAdd
	crdRemove
	flap
)

func (c change) String() string {
	return [...]string{"etag-only", "crd-add", "crd-remove", "flap"}[c]
}

// step makes change k: every 20th a peer flaps (NotReady, then back at the
// next flap of that peer), four in 20 add or remove a CRD on every server,
// the rest change one server's document ETag.
func (w *workload) step(k int) change {
	switch k % 20 {
	case 0:
		p := &w.in.Peers[(k/20)%peers]
		// As a failed scrape does: NotReady, and its last good document
		// kept but marked stale (the merged discovery says so).
		p.Ready = !p.Ready
		p.Stale = !p.Ready
		p.ReadyReason = map[bool]string{true: "DiscoverySynced", false: "ConnectionRefused"}[p.Ready]
		p.ReadyTransition = t0.Add(time.Duration(k) * time.Second)
		return flap
	case 1, 3:
		name := fmt.Sprintf("crd%04d.example.com", w.next)
		w.next++
		w.crds = append(w.crds, name)
		g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
			Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "widgets", Scope: apidiscoveryv2.ScopeNamespace,
				Verbs: []string{"get", "list", "watch"}, ResponseKind: &metav1.GroupVersionKind{Group: name, Version: "v1", Kind: "Widget"}}},
		}}}
		for i := range w.in.Peers {
			w.in.Peers[i].APIs = append(slices.Clip(w.in.Peers[i].APIs), g)
		}
		w.in.ClusterWide[schema.GroupVersion{Group: name, Version: "v1"}] = compute.SourceCRD
		return crdAdd
	case 2, 4:
		if len(w.crds) == 0 {
			return w.etag(k)
		}
		name := w.crds[0]
		w.crds = w.crds[1:]
		for i := range w.in.Peers {
			w.in.Peers[i].APIs = slices.DeleteFunc(slices.Clone(w.in.Peers[i].APIs), func(g apidiscoveryv2.APIGroupDiscovery) bool { return g.Name == name })
		}
		delete(w.in.ClusterWide, schema.GroupVersion{Group: name, Version: "v1"})
		return crdRemove
	}
	return w.etag(k)
}

func (w *workload) etag(k int) change {
	w.in.Peers[k%peers].APIsETag = fmt.Sprintf(`"apis-%d"`, k)
	w.etagPeer = k % peers
	return etagOnly
}

// patchETag is the engine's output after an ETag-only change, without
// recomputing 25,000 GVRs: the peer's discoveryETag changes, nothing else.
// The test checks it against compute.Compute now and then.
func (w *workload) patchETag(prev compute.Output) compute.Output {
	next := prev
	next.Peers = slices.Clone(prev.Peers)
	id := w.in.Peers[w.etagPeer].ServerID
	for i := range next.Peers {
		if next.Peers[i].Spec.ServerID == id {
			p := next.Peers[i].DeepCopy()
			p.Status.DiscoveryETag = w.in.Peers[w.etagPeer].APIsETag
			next.Peers[i] = *p
		}
	}
	return next
}
