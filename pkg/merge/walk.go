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
	"iter"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resources walks discovery documents: it yields every resource (not
// subresource) of every version of every group, in document order, with its
// group-version-resource. The resource points into the document.
func Resources(docs ...[]apidiscoveryv2.APIGroupDiscovery) iter.Seq2[schema.GroupVersionResource, *apidiscoveryv2.APIResourceDiscovery] {
	return func(yield func(schema.GroupVersionResource, *apidiscoveryv2.APIResourceDiscovery) bool) {
		for _, doc := range docs {
			for gi := range doc {
				g := &doc[gi]
				for vi := range g.Versions {
					v := &g.Versions[vi]
					for ri := range v.Resources {
						r := &v.Resources[ri]
						if !yield(schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}, r) {
							return
						}
					}
				}
			}
		}
	}
}

// CountResources is the number of resources Resources yields.
func CountResources(docs ...[]apidiscoveryv2.APIGroupDiscovery) int {
	n := 0
	for _, doc := range docs {
		for gi := range doc {
			for vi := range doc[gi].Versions {
				n += len(doc[gi].Versions[vi].Resources)
			}
		}
	}
	return n
}
