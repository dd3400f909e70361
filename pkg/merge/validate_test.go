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
	"errors"
	"fmt"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidate(t *testing.T) {
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	groups := func(n int) []apidiscoveryv2.APIGroupDiscovery {
		out := make([]apidiscoveryv2.APIGroupDiscovery, n)
		for i := range out {
			out[i] = grp(fmt.Sprintf("g%d.io", i), ver("v1"))
		}
		return out
	}
	versions := func(n int) []apidiscoveryv2.APIVersionDiscovery {
		out := make([]apidiscoveryv2.APIVersionDiscovery, n)
		for i := range out {
			out[i] = ver(fmt.Sprintf("v%d", i+1))
		}
		return out
	}
	resources := func(n int) []apidiscoveryv2.APIResourceDiscovery {
		out := make([]apidiscoveryv2.APIResourceDiscovery, n)
		for i := range out {
			out[i] = res(fmt.Sprintf("r%d", i), "get")
		}
		return out
	}
	withResource := func(r apidiscoveryv2.APIResourceDiscovery) []apidiscoveryv2.APIGroupDiscovery {
		return []apidiscoveryv2.APIGroupDiscovery{grp("g.io", ver("v1", r))}
	}
	long := strings.Repeat("a", MaxNameLength+1)

	tests := []struct {
		name    string
		groups  []apidiscoveryv2.APIGroupDiscovery
		wantErr string // substring; "" means valid
	}{
		{name: "nil document", groups: nil},
		{name: "realistic document", groups: realisticDocs(1, 1, 3000)[0].Groups},
		{name: "core group from /api", groups: []apidiscoveryv2.APIGroupDiscovery{grp("", ver("v1", res("pods", "get")))}},
		{name: "stale version without resources", groups: []apidiscoveryv2.APIGroupDiscovery{grp("m.io", apidiscoveryv2.APIVersionDiscovery{Version: "v1beta1", Freshness: apidiscoveryv2.DiscoveryFreshnessStale})}},
		{name: "repeated verbs are tolerated", groups: withResource(res("r", "get", "get"))},
		{name: "at the caps", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			r := res("r", many(MaxVerbs, func(i int) string { return fmt.Sprintf("verb%d", i) })...)
			return []apidiscoveryv2.APIGroupDiscovery{grp("g.io", ver("v1", append(resources(MaxResourcesPerVersion-1), r)...))}
		}()},

		{name: "group name too long", groups: []apidiscoveryv2.APIGroupDiscovery{grp(long, ver("v1"))}, wantErr: "items[0].metadata.name: Too long"},
		{name: "error names the group and version", groups: []apidiscoveryv2.APIGroupDiscovery{grp("ok.io", ver("v1")), grp("a.io", ver("v2", res("r", "get", "bad verb")))},
			wantErr: `group "a.io" version "v2": items[1].versions[0].resources[0].verbs[1]: Invalid value: "bad verb"`},
		{name: "invalid group name", groups: []apidiscoveryv2.APIGroupDiscovery{grp("Bad_Group", ver("v1"))}, wantErr: "items[0].metadata.name"},
		{name: "duplicate group", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", ver("v1")), grp("a.io", ver("v2"))}, wantErr: "items[1].metadata.name: Duplicate"},
		{name: "too many groups", groups: groups(MaxGroups + 1), wantErr: "items: Too many"},
		{name: "empty version", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", ver(""))}, wantErr: "items[0].versions[0].version"},
		{name: "invalid version", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", ver("v1/x"))}, wantErr: "items[0].versions[0].version"},
		{name: "duplicate version", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", ver("v1"), ver("v1"))}, wantErr: "items[0].versions[1].version: Duplicate"},
		{name: "too many versions", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", versions(MaxVersionsPerGroup+1)...)}, wantErr: "items[0].versions: Too many"},
		{name: "unknown freshness", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", apidiscoveryv2.APIVersionDiscovery{Version: "v1", Freshness: "Fresh"})}, wantErr: "freshness: Unsupported"},
		{name: "too many resources in a version", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", ver("v1", resources(MaxResourcesPerVersion+1)...))}, wantErr: "items[0].versions[0].resources: Too many"},
		{name: "too many resources in the document", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			var out []apidiscoveryv2.APIGroupDiscovery
			for i := 0; i*MaxResourcesPerVersion <= MaxResources; i++ {
				out = append(out, grp(fmt.Sprintf("g%d.io", i), ver("v1", resources(MaxResourcesPerVersion)...)))
			}
			return out
		}(), wantErr: "more than 65536 resources"},
		{name: "empty resource", groups: withResource(res("", "get")), wantErr: "resources[0].resource: Required"},
		{name: "resource with slash", groups: withResource(res("pods/status", "get")), wantErr: "valid URL path segment"},
		{name: "resource dot-dot", groups: withResource(res("..", "get")), wantErr: "valid URL path segment"},
		{name: "resource with space", groups: withResource(res("a b", "get")), wantErr: "printable ASCII"},
		{name: "resource too long", groups: withResource(res(long, "get")), wantErr: "Too long"},
		{name: "duplicate resource", groups: []apidiscoveryv2.APIGroupDiscovery{grp("a.io", ver("v1", res("r", "get"), res("r", "list")))}, wantErr: "resources[1].resource: Duplicate"},
		{name: "empty verb", groups: withResource(res("r", "get", "")), wantErr: "verbs[1]: Required"},
		{name: "too many verbs", groups: withResource(res("r", many(MaxVerbs+1, func(i int) string { return fmt.Sprint("v", i) })...)), wantErr: "verbs: Too many"},
		{name: "too many short names", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			r := res("r", "get")
			r.ShortNames = many(MaxShortNames+1, func(i int) string { return fmt.Sprint("s", i) })
			return withResource(r)
		}(), wantErr: "shortNames: Too many"},
		{name: "too many categories", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			r := res("r", "get")
			r.Categories = many(MaxCategories+1, func(i int) string { return fmt.Sprint("c", i) })
			return withResource(r)
		}(), wantErr: "categories: Too many"},
		{name: "control character in kind", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			r := res("r", "get")
			r.ResponseKind = &metav1.GroupVersionKind{Version: "v1", Kind: "K\x00"}
			return withResource(r)
		}(), wantErr: "responseKind.kind"},
		{name: "duplicate subresource", groups: withResource(withSubs(res("r", "get"), sub("status", "get"), sub("status", "patch"))), wantErr: "subresources[1].subresource: Duplicate"},
		{name: "empty subresource", groups: withResource(withSubs(res("r", "get"), sub("", "get"))), wantErr: "subresources[0].subresource: Required"},
		{name: "too many subresources", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			var subs []apidiscoveryv2.APISubresourceDiscovery
			for i := 0; i <= MaxSubresourcesPerResource; i++ {
				subs = append(subs, sub(fmt.Sprint("s", i), "get"))
			}
			return withResource(withSubs(res("r", "get"), subs...))
		}(), wantErr: "subresources: Too many"},
		{name: "too many accepted types", groups: func() []apidiscoveryv2.APIGroupDiscovery {
			s := sub("scale", "get")
			s.AcceptedTypes = make([]metav1.GroupVersionKind, MaxAcceptedTypes+1)
			return withResource(withSubs(res("r", "get"), s))
		}(), wantErr: "acceptedTypes: Too many"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.groups)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidDocument) {
				t.Errorf("error %v does not wrap ErrInvalidDocument", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}
