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
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

func TestETag(t *testing.T) {
	docs := realisticDocs(5, 3, 300)
	for _, tc := range []struct {
		name   string
		groups []apidiscoveryv2.APIGroupDiscovery
	}{
		{"nil", nil},
		{"empty", []apidiscoveryv2.APIGroupDiscovery{}},
		{"merged", Merge(docs, nil)},
		{"html-escaped characters", []apidiscoveryv2.APIGroupDiscovery{grp("a<b>&", ver("v1", res("x<y>", "get")))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ETag(tc.groups)
			if err != nil {
				t.Fatal(err)
			}
			// Upstream's calculateETag, transcribed.
			b, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: tc.groups})
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%X", sha512.Sum512(b)); got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
	nilTag, _ := ETag(nil)
	emptyTag, _ := ETag([]apidiscoveryv2.APIGroupDiscovery{})
	if nilTag == emptyTag {
		t.Error("nil and empty lists must hash differently, as upstream's do")
	}
}

// TestETagMatchesUpstreamCache compares with the ETag upstream caches for its
// merged document (exported TestFetchFromCache), over our merge of the same
// documents.
func TestETagMatchesUpstreamCache(t *testing.T) {
	docs := realisticDocs(6, 3, 600)
	peers := staticPeers{}
	for _, d := range docs {
		peers[d.ServerID] = d.Groups
	}
	_, theirs := aggregated.TestFetchFromCache("", aggregated.NewResourceManager("apis"), peers)
	ours, err := ETag(Merge(docs, nil))
	if err != nil {
		t.Fatal(err)
	}
	if ours != theirs {
		t.Errorf("ours %s, upstream %s", ours, theirs)
	}
}
