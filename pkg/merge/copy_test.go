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
	"reflect"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// build's copy (a few large allocations) gives exactly what the generated
// DeepCopyInto gives, nil and empty slices included.
func TestBuildIsTheGeneratedDeepCopy(t *testing.T) {
	docs := realisticDocs(5, 3, 600)
	// Empty and nil slices of every kind, and pointers, on one resource.
	odd := res("odd")
	odd.Verbs, odd.ShortNames, odd.Categories = []string{}, nil, []string{}
	odd.Subresources = []apidiscoveryv2.APISubresourceDiscovery{
		{Subresource: "status", Verbs: []string{}, AcceptedTypes: []metav1.GroupVersionKind{}},
		{Subresource: "scale", ResponseKind: &metav1.GroupVersionKind{Kind: "Scale"}, AcceptedTypes: []metav1.GroupVersionKind{{Kind: "Scale"}}},
	}
	docs = append(docs, doc("zz", grp("odd.example.com", ver("v1", odd)), apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: "empty.example.com"}}))

	m := merger{index: map[string]int{}}
	var lists [][]string
	for di, d := range sortDocs(docs) {
		lists = append(lists, m.addDocument(di, d.Groups))
	}
	order := mergePreservingRelativeOrderUnique(lists, len(m.accs))
	got := m.build(order)
	for i, name := range order {
		acc := &m.accs[m.index[name]]
		var want apidiscoveryv2.APIGroupDiscovery
		(&apidiscoveryv2.APIGroupDiscovery{TypeMeta: acc.src.TypeMeta, ObjectMeta: acc.src.ObjectMeta, Versions: acc.versions}).DeepCopyInto(&want)
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("group %s: build gives\n%#v\nDeepCopyInto\n%#v", name, got[i], want)
		}
	}
}
