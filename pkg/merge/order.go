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
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/util/dump"
	utilsort "k8s.io/apimachinery/pkg/util/sort"
)

// sortDocs returns the documents in upstream's visiting order: ServerID
// ascending (sort.Strings order). Ties, which upstream cannot have, are broken by
// content so that Merge stays a function of the input set.
func sortDocs(docs []PeerDocument) []*PeerDocument {
	out := make([]*PeerDocument, len(docs))
	for i := range docs {
		out[i] = &docs[i]
	}
	slices.SortStableFunc(out, func(a, b *PeerDocument) int {
		if c := strings.Compare(a.ServerID, b.ServerID); c != 0 {
			return c
		}
		return compareContent(a.Groups, b.Groups)
	})
	return out
}

// compareContent is a total order on documents, consistent with
// reflect.DeepEqual: 0 exactly when they are deeply equal. It compares their
// dump.ForHash encodings (the one apimachinery hashes objects with), which
// tell a nil slice from an empty one and two times apart to the nanosecond;
// JSON would not, and the merge result can. It only orders documents that
// share a ServerID, which upstream cannot have.
func compareContent(a, b []apidiscoveryv2.APIGroupDiscovery) int {
	return strings.Compare(dump.ForHash(a), dump.ForHash(b))
}

// mergePreservingRelativeOrderUnique is apimachinery's
// MergePreservingRelativeOrder (upstream's merge uses it) for lists known to
// hold no duplicates, total being the size of their union: a list holding
// every item is then the answer without building the order graph, which is
// the common case (servers that agree on the order).
func mergePreservingRelativeOrderUnique(lists [][]string, total int) []string {
	for _, l := range lists {
		if len(l) == total {
			return l
		}
	}
	return utilsort.MergePreservingRelativeOrder(lists)
}
