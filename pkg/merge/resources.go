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
)

// mergeVersion is upstream's mergeResourcesAcrossVersion.
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

// mergeResource keeps a when both sides are deeply equal (reflect.DeepEqual,
// as upstream's mergeResourcesAcrossVersion) and otherwise unions verbs and
// subresources (upstream's mergeResourceCapabilities).
func mergeResource(a, b *apidiscoveryv2.APIResourceDiscovery) (apidiscoveryv2.APIResourceDiscovery, bool) {
	if resourceEqual(a, b) {
		return *a, false
	}
	out := *a
	if len(out.Resource) == 0 { // as mergeResourceCapabilities does
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
// same name, as the map assignment in upstream's mergeResourceCapabilities does.
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
