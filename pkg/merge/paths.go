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

import apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

// PeerGroupsFromPaths builds one peer's document the way upstream does before
// merging (k8s.io/apiserver v0.37.2 package peerproxy,
// (*peerProxyHandler).fetchNewDiscoveryFor): the groups of /api then /apis,
// without the core group "" (upstream routes core/v1 to peers but keeps it out
// of peer-aggregated /apis), and without a group already seen (first wins).
// The result shares memory with the inputs.
func PeerGroupsFromPaths(api, apis []apidiscoveryv2.APIGroupDiscovery) []apidiscoveryv2.APIGroupDiscovery {
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(api)+len(apis))
	seen := make(map[string]struct{}, len(api)+len(apis))
	for _, list := range [][]apidiscoveryv2.APIGroupDiscovery{api, apis} {
		for i := range list {
			name := list[i].Name
			if name == "" {
				continue
			}
			if _, ok := seen[name]; ok {
				continue
			}
			seen[name] = struct{}{}
			out = append(out, list[i])
		}
	}
	return out
}
