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
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

// benchDocs is 3 peers x ~3,000 GVRs: 60 groups, 1-3 versions, 8 verbs per
// resource, status/scale subresources, mostly identical with upgrade skew.
func benchDocs() []PeerDocument { return realisticDocs(1, 3, 3000) }

func BenchmarkMerge(b *testing.B) {
	docs := benchDocs()
	b.Run("ours", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Merge(docs, nil)
		}
	})
	b.Run("upstream", func(b *testing.B) {
		// The first ID is upstream's local server, the others its peers, as
		// in upstreamMerge; the map is built once, as upstream's provider does.
		peers := map[string][]apidiscoveryv2.APIGroupDiscovery{}
		for _, d := range docs[1:] {
			peers[d.ServerID] = d.Groups
		}
		b.ReportAllocs()
		for b.Loop() {
			aggregated.TestMergeResources(docs[0].ServerID, docs[0].Groups, peers)
		}
	})
}

func BenchmarkETag(b *testing.B) {
	merged := Merge(benchDocs(), nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ETag(merged); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	groups := benchDocs()[0].Groups
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(groups); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBenchDocsSize(t *testing.T) {
	docs := benchDocs()
	if docs[0].ServerID >= docs[1].ServerID || docs[1].ServerID >= docs[2].ServerID {
		t.Fatal("benchmark assumes docs sorted by ID")
	}
	for _, d := range docs {
		n := CountResources(d.Groups)
		if n < 2700 || n > 3300 {
			t.Errorf("%s: %d GVRs, want ~3000", d.ServerID, n)
		}
		t.Logf("%s: %d groups, %d GVRs", d.ServerID, len(d.Groups), n)
	}
	merged := Merge(docs, nil)
	t.Logf("merged: %d groups, %d GVRs", len(merged), CountResources(merged))
}
