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
	"fmt"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/test/discoverydocs"
)

// Builders for compact test tables.

func grp(name string, versions ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: versions}
}

// grp1 is a group with one version serving one resource.
func grp1(name string) apidiscoveryv2.APIGroupDiscovery {
	return grp(name, ver("v1", res("things", "get", "list")))
}

func ver(name string, resources ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{Version: name, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
}

func res(name string, verbs ...string) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{
		Resource:         name,
		SingularResource: strings.TrimSuffix(name, "s"),
		Scope:            apidiscoveryv2.ScopeNamespace,
		Verbs:            verbs,
	}
}

func withSubs(r apidiscoveryv2.APIResourceDiscovery, subs ...apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	r.Subresources = subs
	return r
}

func sub(name string, verbs ...string) apidiscoveryv2.APISubresourceDiscovery {
	return apidiscoveryv2.APISubresourceDiscovery{Subresource: name, Verbs: verbs}
}

func doc(id string, groups ...apidiscoveryv2.APIGroupDiscovery) PeerDocument {
	return PeerDocument{ServerID: id, Groups: groups}
}

// shape renders groups as "g/v:r[verbs](subs) ..." for readable diffs.
func shape(groups []apidiscoveryv2.APIGroupDiscovery) string {
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%s{", g.Name)
		for _, v := range g.Versions {
			fmt.Fprintf(&b, "%s[", v.Version)
			for _, r := range v.Resources {
				fmt.Fprintf(&b, "%s%v", r.Resource, r.Verbs)
				for _, s := range r.Subresources {
					fmt.Fprintf(&b, "/%s%v", s.Subresource, s.Verbs)
				}
				b.WriteString(" ")
			}
			b.WriteString("] ")
		}
		b.WriteString("} ")
	}
	return b.String()
}

func deepCopyDocs(docs []PeerDocument) []PeerDocument {
	out := make([]PeerDocument, len(docs))
	for i, d := range docs {
		out[i].ServerID = d.ServerID
		if d.Groups != nil {
			out[i].Groups = make([]apidiscoveryv2.APIGroupDiscovery, len(d.Groups))
			for j := range d.Groups {
				d.Groups[j].DeepCopyInto(&out[i].Groups[j])
			}
		}
	}
	return out
}

// filterForUpstream applies exclude to one document the way Merge does,
// so upstream can be fed what its GVExclusionManager would hand it.
func filterForUpstream(groups []apidiscoveryv2.APIGroupDiscovery, exclude func(g, v string) bool) []apidiscoveryv2.APIGroupDiscovery {
	if exclude == nil {
		return groups
	}
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(groups))
	for _, g := range groups {
		if len(g.Versions) == 0 {
			out = append(out, g)
			continue
		}
		var vs []apidiscoveryv2.APIVersionDiscovery
		for _, v := range g.Versions {
			if !exclude(g.Name, v.Version) {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			continue
		}
		if len(vs) != len(g.Versions) {
			g.Versions = vs
		}
		out = append(out, g)
	}
	return out
}

// realisticDocs is discoverydocs.Servers over 60 groups as PeerDocuments.
func realisticDocs(seed uint64, n, gvrs int) []PeerDocument {
	var docs []PeerDocument
	for _, s := range discoverydocs.Servers(seed, n, 60, gvrs) {
		docs = append(docs, PeerDocument{ServerID: s.ID, Groups: s.Groups})
	}
	return docs
}
