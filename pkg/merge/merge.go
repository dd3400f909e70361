// Package merge is the pure merge of several kube-apiservers' non-peer-aggregated
// ("profile=nopeer") discovery documents into one peer-aggregated document.
//
// It reproduces upstream's merge exactly (k8s.io/apiserver v0.37.2,
// pkg/endpoints/discovery/aggregated/peer_aggregated_handler.go, "PAH" below):
//
//   - Servers are visited in lexicographic ServerID order (PAH:173, :471-478).
//   - Group order is MergePreservingRelativeOrder over every server's group-name
//     list at once (PAH:211); version and resource order is the same function
//     applied pairwise, accumulated result first, then the next server
//     (PAH:289, :348). The pairwise fold is not the same as one merge over all
//     lists when lists conflict, so it is kept as is.
//   - Anything that is not merged comes from the first server (in ID order) that
//     has it: group ObjectMeta/TypeMeta (PAH:293-297), version Freshness
//     (PAH:352-356), and every resource field but Verbs and Subresources
//     (PAH:403-410).
//   - A resource served identically (reflect.DeepEqual) by both sides is kept as
//     it is, verbs in their original order (PAH:323-325). Otherwise verbs become
//     the sorted union, nil when empty (PAH:363-380), and subresources the union
//     by name, sorted by name, the later server's entry winning a name clash
//     (PAH:382-401).
//
// Deliberate differences. Only the first can show with well-formed documents,
// and then only in which server's Freshness or group metadata is kept:
//
//   - Upstream has one distinguished "local" server whose list it returns
//     unmerged when nothing changed (PAH:166-168, :199-201); its Freshness and
//     group metadata then win even if its ID does not sort first. Merge has no
//     local server: the first ID always wins, as on upstream's general path.
//   - Duplicates inside one document (a group, a version within a group, a
//     resource within a version) are folded into their first occurrence with the
//     same rules used across servers, and the name counts once in the order
//     merge. Upstream folds content the same way (PAH:225-233, :261-269,
//     :320-329) but feeds the repeated name to MergePreservingRelativeOrder,
//     where it reads as a cycle and collapses the whole order to lexicographic.
//     Validate rejects such documents anyway.
//   - Documents with the same ServerID (upstream keys peers by ID in a map, so it
//     cannot have them) are all merged, tied IDs ordered by content (a total
//     order, see compareDeep) so the result stays independent of input order.
//   - exclude drops group-versions from every document before merging, as
//     upstream's GVExclusionManager filters peer documents before they reach the
//     merge (k8s.io/apiserver v0.37.2 pkg/util/peerproxy/gv_exclusion_manager.go:
//     399-468), so the order of what is left is the order upstream computes.
//     Upstream skips that filtering for a peer with no excluded GVR (:431) and,
//     when it does filter, drops the TypeMeta of every group (:449-451) and any
//     group that had no versions to begin with (:463); Merge drops an excluded
//     GV even when it lists no resources, keeps TypeMeta and keeps groups that
//     never had versions. Upstream also never filters the local server's own
//     document, which serves those GVs itself; Merge has no local document.
//
// Upstream only peer-aggregates /apis and drops the core group "" from peer
// documents (k8s.io/apiserver v0.37.2 pkg/util/peerproxy/peer_discovery.go:
// 164-169); PeerGroupsFromPaths rebuilds that exact per-peer input. Merge itself
// treats "" like any other group, so /api documents can be merged too.
package merge

import (
	"reflect"
	"slices"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

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

// sortDocs returns the documents in upstream's visiting order: ServerID
// ascending (sort.Strings order). Ties, which upstream cannot have, are broken by
// content so that Merge stays a function of the input set.
func sortDocs(docs []PeerDocument) []*PeerDocument {
	out := make([]*PeerDocument, len(docs))
	for i := range docs {
		out[i] = &docs[i]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ServerID < out[j].ServerID })
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && out[j].ServerID == out[i].ServerID {
			j++
		}
		if j-i > 1 {
			sortByContent(out[i:j])
		}
		i = j
	}
	return out
}

func sortByContent(run []*PeerDocument) {
	sort.SliceStable(run, func(i, j int) bool {
		return compareDeep(reflect.ValueOf(run[i].Groups), reflect.ValueOf(run[j].Groups)) < 0
	})
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
// processServerGroups, PAH:217-239) and returns its group-name list for the
// group order merge.
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

// listOps tells the generic list merge how to handle one level (versions of a
// group, resources of a version).
type listOps[T any] struct {
	name func(*T) string
	// merge merges b into a (a normalized, b possibly not) and reports whether
	// the result differs from a.
	merge func(a, b *T) (T, bool)
	// norm folds duplicates nested inside one item; nil when there are none.
	norm func(*T) (T, bool)
}

var versionOps = listOps[apidiscoveryv2.APIVersionDiscovery]{
	name:  func(v *apidiscoveryv2.APIVersionDiscovery) string { return v.Version },
	merge: mergeVersion,
	norm:  normVersion,
}

var resOps = listOps[apidiscoveryv2.APIResourceDiscovery]{
	name:  func(r *apidiscoveryv2.APIResourceDiscovery) string { return r.Resource },
	merge: mergeResource,
}

// mergeVersion is upstream's mergeResourcesAcrossVersion (PAH:303-357).
func mergeVersion(a, b *apidiscoveryv2.APIVersionDiscovery) (apidiscoveryv2.APIVersionDiscovery, bool) {
	res, changed := mergeLists(a.Resources, b.Resources, &resOps)
	if !changed {
		return *a, false
	}
	return apidiscoveryv2.APIVersionDiscovery{Version: a.Version, Resources: res, Freshness: a.Freshness}, true
}

func normVersion(v *apidiscoveryv2.APIVersionDiscovery) (apidiscoveryv2.APIVersionDiscovery, bool) {
	res, changed := normList(v.Resources, &resOps)
	if !changed {
		return *v, false
	}
	out := *v
	out.Resources = res
	return out, true
}

// mergeResource keeps a when both sides are deeply equal (PAH:323-325) and
// otherwise unions verbs and subresources (PAH:362-413).
func mergeResource(a, b *apidiscoveryv2.APIResourceDiscovery) (apidiscoveryv2.APIResourceDiscovery, bool) {
	if resourceEqual(a, b) {
		return *a, false
	}
	out := *a
	if len(out.Resource) == 0 { // PAH:406-408
		out = *b
	}
	out.Verbs = unionVerbs(a.Verbs, b.Verbs)
	out.Subresources = unionSubresources(a.Subresources, b.Subresources)
	return out, true
}

func unionVerbs(a, b []string) []string {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make([]string, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	slices.Sort(out)
	return slices.Clip(slices.Compact(out))
}

// unionSubresources unions by name; a later entry replaces an earlier one of the
// same name, as upstream's map assignment does (PAH:383-389).
func unionSubresources(a, b []apidiscoveryv2.APISubresourceDiscovery) []apidiscoveryv2.APISubresourceDiscovery {
	n := len(a) + len(b)
	if n == 0 {
		return nil
	}
	out := make([]apidiscoveryv2.APISubresourceDiscovery, 0, n)
	var idx map[string]int
	if n > smallList {
		idx = make(map[string]int, n)
	}
	add := func(s *apidiscoveryv2.APISubresourceDiscovery) {
		if idx != nil {
			if j, ok := idx[s.Subresource]; ok {
				out[j] = *s
				return
			}
			idx[s.Subresource] = len(out)
		} else {
			for j := range out {
				if out[j].Subresource == s.Subresource {
					out[j] = *s
					return
				}
			}
		}
		out = append(out, *s)
	}
	for i := range a {
		add(&a[i])
	}
	for i := range b {
		add(&b[i])
	}
	slices.SortFunc(out, func(x, y apidiscoveryv2.APISubresourceDiscovery) int {
		return strings.Compare(x.Subresource, y.Subresource)
	})
	return out
}

// smallList is the length up to which a linear scan beats building a map.
const smallList = 24

// mergeLists merges b into a, a being normalized (unique names). This is
// upstream's per-level merge (PAH:244-298, :303-357): items present on both
// sides are merged, the order is MergePreservingRelativeOrder([a, b]).
func mergeLists[T any](a, b []T, o *listOps[T]) ([]T, bool) {
	if sameNames(a, b, o.name) {
		// Same names in the same order (the common case): no order merge, and
		// b is unique because a is.
		var out []T
		for i := range b {
			if m, changed := o.merge(&a[i], &b[i]); changed {
				if out == nil {
					out = slices.Clone(a)
				}
				out[i] = m
			}
		}
		if out == nil {
			return a, false
		}
		return out, true
	}

	work := make([]T, len(a), len(a)+len(b))
	copy(work, a)
	idx := make(map[string]int, len(a)+len(b))
	for i := range a {
		idx[o.name(&a[i])] = i
	}
	inB := make([]bool, len(a), len(a)+len(b))
	bNames := make([]string, 0, len(b))
	for i := range b {
		n := o.name(&b[i])
		if j, ok := idx[n]; ok {
			// Also folds a name repeated inside b into its first occurrence.
			if m, changed := o.merge(&work[j], &b[i]); changed {
				work[j] = m
			}
			if !inB[j] {
				inB[j] = true
				bNames = append(bNames, n)
			}
			continue
		}
		item := b[i]
		if o.norm != nil {
			item, _ = o.norm(&b[i])
		}
		idx[n] = len(work)
		work = append(work, item)
		inB = append(inB, true)
		bNames = append(bNames, n)
	}
	aNames := make([]string, len(a))
	for i := range a {
		aNames[i] = o.name(&a[i])
	}
	order := mergePreservingRelativeOrderUnique([][]string{aNames, bNames}, len(work))
	out := make([]T, 0, len(work))
	for _, n := range order {
		out = append(out, work[idx[n]])
	}
	return out, true
}

func sameNames[T any](a, b []T, name func(*T) string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if name(&a[i]) != name(&b[i]) {
			return false
		}
	}
	return true
}

// normList folds repeated names in one list into their first occurrence and
// normalizes nested lists. It returns list itself when nothing needed folding.
func normList[T any](list []T, o *listOps[T]) ([]T, bool) {
	if hasDuplicateNames(list, o.name) {
		return mergeLists(nil, list, o)
	}
	if o.norm == nil {
		return list, false
	}
	var out []T
	for i := range list {
		if n, changed := o.norm(&list[i]); changed {
			if out == nil {
				out = slices.Clone(list)
			}
			out[i] = n
		}
	}
	if out == nil {
		return list, false
	}
	return out, true
}

func hasDuplicateNames[T any](list []T, name func(*T) string) bool {
	if len(list) <= smallList {
		for i := 1; i < len(list); i++ {
			ni := name(&list[i])
			for j := 0; j < i; j++ {
				if name(&list[j]) == ni {
					return true
				}
			}
		}
		return false
	}
	seen := make(map[string]struct{}, len(list))
	for i := range list {
		n := name(&list[i])
		if _, ok := seen[n]; ok {
			return true
		}
		seen[n] = struct{}{}
	}
	return false
}
