package merge

import utilsort "k8s.io/apimachinery/pkg/util/sort"

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
