package merge

import apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

// PeerGroupsFromPaths builds one peer's document the way upstream does before
// merging (k8s.io/apiserver v0.37.2 pkg/util/peerproxy/peer_discovery.go:
// 138-175): the groups of /api then /apis, without the core group "" (upstream
// routes core/v1 to peers but keeps it out of peer-aggregated /apis), and
// without a group already seen (first wins). The result shares memory with the
// inputs.
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
