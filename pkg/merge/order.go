package merge

import (
	"container/heap"
	"sort"
)

// mergePreservingRelativeOrder is a transcription of
// k8s.io/apimachinery v0.37.2 pkg/util/sort/sort.go MergePreservingRelativeOrder
// (lines 52-102 and topologicalSort, 128-166), with the same result for every
// input, duplicates and cycles included. It is copied rather than imported so
// this package also builds against k8s.io/apimachinery v0.36, which lacks it
// (the filter links it into v1.36 kube-apiservers). Tests check it against the
// original.
//
// In short: the first input list holding every item exactly once is returned
// as is; otherwise a topological sort of the "a directly precedes b" edges,
// smallest name first among ready items; on a cycle, all items sorted.
func mergePreservingRelativeOrder(inputLists [][]string) []string {
	if len(inputLists) == 0 {
		return nil
	}

	g := newOrderGraph()
	for _, list := range inputLists {
		for i, item := range list {
			u := g.node(item)
			if i < len(list)-1 {
				g.edge(u, g.node(list[i+1]))
			}
		}
	}

	total := len(g.names)
	for _, list := range inputLists {
		if len(list) == total && isUnique(list) {
			return list
		}
	}
	return g.sort()
}

// mergePreservingRelativeOrderUnique is mergePreservingRelativeOrder for lists
// known to hold no duplicates, total being the size of their union: the
// shortcut then needs no graph, which is the common case.
func mergePreservingRelativeOrderUnique(lists [][]string, total int) []string {
	for _, l := range lists {
		if len(l) == total {
			return l
		}
	}
	return mergePreservingRelativeOrder(lists)
}

func isUnique(list []string) bool {
	seen := make(map[string]struct{}, len(list))
	for _, item := range list {
		if _, ok := seen[item]; ok {
			return false
		}
		seen[item] = struct{}{}
	}
	return true
}

type orderGraph struct {
	ids      map[string]int
	names    []string
	out      [][]int
	inDegree []int
	edges    map[[2]int]struct{}
}

func newOrderGraph() *orderGraph {
	return &orderGraph{ids: map[string]int{}, edges: map[[2]int]struct{}{}}
}

func (g *orderGraph) node(name string) int {
	if id, ok := g.ids[name]; ok {
		return id
	}
	id := len(g.names)
	g.ids[name] = id
	g.names = append(g.names, name)
	g.out = append(g.out, nil)
	g.inDegree = append(g.inDegree, 0)
	return id
}

// edge adds u->v once, as upstream counts an in-degree only for a new edge.
// A self-edge (an item repeated back to back) is kept: it is a cycle upstream.
func (g *orderGraph) edge(u, v int) {
	k := [2]int{u, v}
	if _, ok := g.edges[k]; ok {
		return
	}
	g.edges[k] = struct{}{}
	g.out[u] = append(g.out[u], v)
	g.inDegree[v]++
}

// sort is Kahn's algorithm with a min-heap on names; on a cycle every item is
// returned sorted, as upstream falls back to.
func (g *orderGraph) sort() []string {
	h := &nameHeap{names: g.names}
	for id, d := range g.inDegree {
		if d == 0 {
			h.ids = append(h.ids, id)
		}
	}
	heap.Init(h)
	result := make([]string, 0, len(g.names))
	for h.Len() > 0 {
		u := heap.Pop(h).(int)
		result = append(result, g.names[u])
		for _, v := range g.out[u] {
			g.inDegree[v]--
			if g.inDegree[v] == 0 {
				heap.Push(h, v)
			}
		}
	}
	if len(result) != len(g.names) {
		result = append(result[:0], g.names...)
		sort.Strings(result)
	}
	return result
}

type nameHeap struct {
	ids   []int
	names []string
}

func (h *nameHeap) Len() int           { return len(h.ids) }
func (h *nameHeap) Less(i, j int) bool { return h.names[h.ids[i]] < h.names[h.ids[j]] }
func (h *nameHeap) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *nameHeap) Push(x any)         { h.ids = append(h.ids, x.(int)) }
func (h *nameHeap) Pop() any {
	n := len(h.ids)
	x := h.ids[n-1]
	h.ids = h.ids[:n-1]
	return x
}
