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

package compute

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// benchInput is 5 peers with ~5,000 GVRs each, with skew, 40 CRD GVs and a
// tombstoned peer among them.
func benchInput() Input {
	peers := realisticPeers(11, 5, 5000)
	peers[3].Ready, peers[3].Stale = false, true
	peers[4].Left, peers[4].LeftTime = true, t0
	cw := map[schema.GroupVersion]string{}
	for _, g := range peers[0].APIs[:40] {
		cw[schema.GroupVersion{Group: g.Name, Version: g.Versions[0].Version}] = SourceCRD
	}
	return Input{Peers: peers, ClusterWide: cw}
}

func TestBenchInputSize(t *testing.T) {
	in := benchInput()
	out, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range out.Peers {
		if p.Status.ResourceCount < 4500 || p.Status.ResourceCount > 5500 || p.Status.GroupCount < 95 {
			t.Errorf("%s: %d resources in %d groups, want ~5,000 in ~100", p.Name, p.Status.ResourceCount, p.Status.GroupCount)
		}
	}
	if len(out.Routes) < 5000 {
		t.Errorf("%d routes, want over 5,000", len(out.Routes))
	}
}

func BenchmarkComputeRoutes(b *testing.B) {
	in := benchInput()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Compute(in); err != nil {
			b.Fatal(err)
		}
	}
}
