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

// Package merge is the pure merge of several kube-apiservers' non-peer-aggregated
// ("profile=nopeer") discovery documents into one peer-aggregated document.
//
// It reproduces upstream's merge exactly (k8s.io/apiserver v0.37.2,
// package aggregated, the peerAggregatedDiscoveryHandler):
//
//   - Servers are visited in lexicographic ServerID order (mergeResources,
//     sortServerIDs).
//   - Group order is MergePreservingRelativeOrder over every server's group-name
//     list at once (mergeResources); version and resource order is the same
//     function applied pairwise, accumulated result first, then the next server
//     (mergeVersionsAcrossGroup, mergeResourcesAcrossVersion). The pairwise fold
//     is not the same as one merge over all lists when lists conflict, so it is
//     kept as is.
//   - Anything that is not merged comes from the first server (in ID order) that
//     has it: group ObjectMeta/TypeMeta (mergeVersionsAcrossGroup), version
//     Freshness (mergeResourcesAcrossVersion), and every resource field but
//     Verbs and Subresources (mergeResourceCapabilities).
//   - A resource served identically (reflect.DeepEqual) by both sides is kept as
//     it is, verbs in their original order (mergeResourcesAcrossVersion).
//     Otherwise verbs become the sorted union, nil when empty, and subresources
//     the union by name, sorted by name, the later server's entry winning a name
//     clash (mergeResourceCapabilities).
//
// Deliberate differences. Only the first can show with well-formed documents,
// and then only in which server's Freshness or group metadata is kept:
//
//   - Upstream has one distinguished "local" server whose list it returns
//     unmerged when nothing changed (mergeResources); its Freshness and group
//     metadata then win even if its ID does not sort first. Merge has no local
//     server: the first ID always wins, as on upstream's general path.
//   - Duplicates inside one document (a group, a version within a group, a
//     resource within a version) are folded into their first occurrence with the
//     same rules used across servers, and the name counts once in the order
//     merge. Upstream folds content the same way (processServerGroups,
//     mergeVersionsAcrossGroup, mergeResourcesAcrossVersion) but feeds the
//     repeated name to MergePreservingRelativeOrder, where it reads as a cycle
//     and collapses the whole order to lexicographic. Validate rejects such
//     documents anyway.
//   - Documents with the same ServerID (upstream keys peers by ID in a map, so it
//     cannot have them) are all merged, tied IDs ordered by content (a total
//     order, see compareContent) so the result stays independent of input order.
//   - exclude drops group-versions from every document before merging, as
//     upstream's GVExclusionManager filters peer documents before they reach the
//     merge (k8s.io/apiserver v0.37.2 package peerproxy,
//     (*GVExclusionManager).filterPeerDiscoveryCache), so the order of what is
//     left is the order upstream computes. Upstream skips that filtering for a
//     peer with no excluded GVR (filterPeerCacheEntry) and, when it does filter,
//     drops the TypeMeta of every group and any group that had no versions to
//     begin with (filterGroupDiscovery); Merge drops an excluded GV even when it
//     lists no resources, keeps TypeMeta and keeps groups that never had
//     versions. Upstream also never filters the local server's own document,
//     which serves those GVs itself; Merge has no local document.
//
// Upstream only peer-aggregates /apis and drops the core group "" from peer
// documents (k8s.io/apiserver v0.37.2 package peerproxy,
// (*peerProxyHandler).fetchNewDiscoveryFor); PeerGroupsFromPaths rebuilds that
// exact per-peer input. Merge itself treats "" like any other group, so /api
// documents can be merged too.
package merge

import apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

// PeerDocument is one server's non-peer-aggregated discovery document.
type PeerDocument struct {
	ServerID string                             // peer identity
	Groups   []apidiscoveryv2.APIGroupDiscovery // k8s.io/api/apidiscovery/v2
}

// Merge merges the documents of several servers (given in any order) into one,
// deterministically: same inputs (as a set) => deeply equal output. It does not
// modify its inputs and the result shares no memory with them (strings aside).
// exclude, if non-nil, drops group-versions (e.g. a deleted CRD's) from the
// result; a group left with no versions is dropped. The result is never nil.
func Merge(docs []PeerDocument, exclude func(group, version string) bool) []apidiscoveryv2.APIGroupDiscovery {
	ordered := sortDocs(docs)

	m := merger{
		exclude: exclude,
		index:   make(map[string]int, groupCountHint(docs)),
	}
	m.accs = make([]groupAcc, 0, groupCountHint(docs))
	lists := make([][]string, 0, len(ordered))
	for di, d := range ordered {
		lists = append(lists, m.addDocument(di, d.Groups))
	}
	order := mergePreservingRelativeOrderUnique(lists, len(m.accs))
	return m.build(order)
}

// groupCountHint sizes the group map from the largest document, which is close
// to the union when servers mostly agree.
func groupCountHint(docs []PeerDocument) int {
	n := 0
	for i := range docs {
		n = max(n, len(docs[i].Groups))
	}
	return n + n/8
}

// groupAcc is one group as merged so far. Its slices may alias the inputs; they
// are never written to, and build copies them out.
type groupAcc struct {
	src      *apidiscoveryv2.APIGroupDiscovery // first occurrence: metadata source
	versions []apidiscoveryv2.APIVersionDiscovery
	lastDoc  int // last document that listed the group, to count it once per document
}

type merger struct {
	exclude func(group, version string) bool
	index   map[string]int // group name -> accs index
	accs    []groupAcc
}

// addDocument folds one document into the accumulated groups (upstream's
// processServerGroups) and returns its group-name list for the group order
// merge.
func (m *merger) addDocument(di int, groups []apidiscoveryv2.APIGroupDiscovery) []string {
	names := make([]string, 0, len(groups))
	for gi := range groups {
		g := &groups[gi]
		versions, keep := m.filterVersions(g)
		if !keep {
			continue
		}
		if ai, ok := m.index[g.Name]; ok {
			acc := &m.accs[ai]
			if merged, changed := mergeLists(acc.versions, versions, &versionOps); changed {
				acc.versions = merged
			}
			if acc.lastDoc != di {
				acc.lastDoc = di
				names = append(names, g.Name)
			}
			continue
		}
		versions, _ = normList(versions, &versionOps)
		m.index[g.Name] = len(m.accs)
		m.accs = append(m.accs, groupAcc{src: g, versions: versions, lastDoc: di})
		names = append(names, g.Name)
	}
	return names
}

// filterVersions applies exclude. keep is false when exclusion removed every
// version of a group that had some.
func (m *merger) filterVersions(g *apidiscoveryv2.APIGroupDiscovery) (versions []apidiscoveryv2.APIVersionDiscovery, keep bool) {
	if m.exclude == nil {
		return g.Versions, true
	}
	first := -1
	for i := range g.Versions {
		if m.exclude(g.Name, g.Versions[i].Version) {
			first = i
			break
		}
	}
	if first < 0 {
		return g.Versions, true
	}
	out := make([]apidiscoveryv2.APIVersionDiscovery, first, len(g.Versions)-1)
	copy(out, g.Versions[:first])
	for i := first + 1; i < len(g.Versions); i++ {
		if !m.exclude(g.Name, g.Versions[i].Version) {
			out = append(out, g.Versions[i])
		}
	}
	return out, len(out) > 0
}
