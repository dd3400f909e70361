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
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMergePermutationRealistic(t *testing.T) {
	docs := realisticDocs(3, 4, 900)
	want := Merge(docs, nil)
	for _, p := range permutations(docs) {
		if got := Merge(p, nil); !reflect.DeepEqual(got, want) {
			t.Fatalf("permutation %v differs", ids(p))
		}
	}
}

// permutations returns every ordering for up to 4 documents, and a few
// rotations and the reverse beyond that.
func permutations(docs []PeerDocument) [][]PeerDocument {
	if len(docs) <= 4 {
		var out [][]PeerDocument
		var rec func(prefix, rest []PeerDocument)
		rec = func(prefix, rest []PeerDocument) {
			if len(rest) == 0 {
				out = append(out, slices.Clone(prefix))
				return
			}
			for i := range rest {
				next := append(slices.Clone(rest[:i]), rest[i+1:]...)
				rec(append(prefix, rest[i]), next)
			}
		}
		rec(nil, docs)
		return out
	}
	var out [][]PeerDocument
	for r := 1; r < len(docs); r++ {
		out = append(out, append(slices.Clone(docs[r:]), docs[:r]...))
	}
	rev := slices.Clone(docs)
	slices.Reverse(rev)
	return append(out, rev)
}

func ids(docs []PeerDocument) []string {
	out := make([]string, len(docs))
	for i := range docs {
		out[i] = docs[i].ServerID
	}
	return out
}

func TestMergeSameIDIndistinguishableInJSON(t *testing.T) {
	// Same ID, same JSON, different Go values (nil vs empty short names, a
	// creation time within the same second): the result must still not depend
	// on input order.
	a := res("r", "get")
	a.ShortNames = nil
	b := res("r", "get")
	b.ShortNames = []string{}
	ga := grp("g", ver("v1", a))
	gb := grp("g", ver("v1", b))
	gb.CreationTimestamp = metav1.NewTime(time.Unix(0, 5))
	docs := []PeerDocument{doc("x", ga), doc("x", gb)}
	want := Merge(docs, nil)
	if got := Merge([]PeerDocument{docs[1], docs[0]}, nil); !reflect.DeepEqual(got, want) {
		t.Errorf("order matters: %#v vs %#v", got, want)
	}
}

func TestCompareContent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	docs := []PeerDocument{}
	for i := 0; i < 40; i++ {
		d, _ := fuzzDocs([]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
		docs = append(docs, d...)
	}
	for i := range docs {
		for j := range docs {
			a, b := docs[i].Groups, docs[j].Groups
			c, r := compareContent(a, b), compareContent(b, a)
			if c != -r {
				t.Fatalf("not antisymmetric: %d vs %d", c, r)
			}
			if (c == 0) != reflect.DeepEqual(docs[i].Groups, docs[j].Groups) {
				t.Fatalf("compareContent==0 is %v, DeepEqual is %v\n%s\n%s", c == 0, !(c == 0), shape(docs[i].Groups), shape(docs[j].Groups))
			}
		}
	}
}
