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

package merge

import (
	"slices"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

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

// smallList is the length up to which a linear scan beats building a map.
const smallList = 24

// mergeLists merges b into a, a being normalized (unique names). This is
// upstream's per-level merge (mergeVersionsAcrossGroup,
// mergeResourcesAcrossVersion): items present on both sides are merged, the
// order is MergePreservingRelativeOrder([a, b]).
func mergeLists[T any](a, b []T, o *listOps[T]) ([]T, bool) {
	if sameNames(a, b, o.name) {
		// Same names in the same order (the common case): no order merge, and
		// b is unique because a is.
		return rewrite(a, func(i int) (T, bool) { return o.merge(&a[i], &b[i]) })
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
	return rewrite(list, func(i int) (T, bool) { return o.norm(&list[i]) })
}

// rewrite replaces each item of list by f's result where f reports a change.
// It returns list itself when nothing changed, and otherwise a copy: list
// may alias an input document, which is never written to.
func rewrite[T any](list []T, f func(i int) (T, bool)) ([]T, bool) {
	var out []T
	for i := range list {
		if v, changed := f(i); changed {
			if out == nil {
				out = slices.Clone(list)
			}
			out[i] = v
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
