package merge

import (
	"math/rand/v2"
	"reflect"
	"testing"

	utilsort "k8s.io/apimachinery/pkg/util/sort"
)

func TestMergePreservingRelativeOrderMatchesUpstream(t *testing.T) {
	tests := [][][]string{
		nil,
		{},
		{{}},
		{{"a", "b", "c"}, {"b", "c"}},
		{{"a", "c"}, {"b", "c"}},
		{{"a", "b"}, {"b", "a"}},
		{{"b", "a"}, {"a", "b"}, {"0"}},
		{{"a", "a"}},
		{{"a", "b", "a"}, {"c"}},
		{{"x"}, {"y"}, {"x", "y"}},
		{{"c", "a"}, {"b"}, {"a", "d"}},
	}
	for _, lists := range tests {
		if got, want := mergePreservingRelativeOrder(lists), utilsort.MergePreservingRelativeOrder(lists); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %q, upstream %q", lists, got, want)
		}
	}
}

func TestMergePreservingRelativeOrderRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "d", "e", "f", "g"}
	for i := 0; i < 20000; i++ {
		lists := make([][]string, rng.IntN(4))
		for j := range lists {
			l := make([]string, rng.IntN(6))
			for k := range l {
				l[k] = alphabet[rng.IntN(len(alphabet))]
			}
			lists[j] = l
		}
		if got, want := mergePreservingRelativeOrder(lists), utilsort.MergePreservingRelativeOrder(lists); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %q, upstream %q", lists, got, want)
		}
	}
}
