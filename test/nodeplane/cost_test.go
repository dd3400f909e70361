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

package nodeplane

import (
	"testing"
	"time"
)

// TestNodeCost reports what the nodes cost at rest: CPU over 10 s and
// resident memory, of each node's containerd, kubelet and shims, and of its Pods.
func TestNodeCost(t *testing.T) {
	needCluster(t)
	before, err := cluster.NodesUsage()
	if err != nil {
		t.Fatal(err)
	}
	const window = 10 * time.Second
	time.Sleep(window)
	after, err := cluster.NodesUsage()
	if err != nil {
		t.Fatal(err)
	}
	var sys, pods time.Duration
	var sysMem, podsMem int64
	for i, a := range after {
		b := before[i]
		t.Logf("%s at rest: containerd+kubelet+shims %.3f cores, %d MiB RSS; Pods %.3f cores, %d MiB RSS",
			a.Name, float64(a.SystemCPU-b.SystemCPU)/float64(window), a.SystemMemory>>20,
			float64(a.PodsCPU-b.PodsCPU)/float64(window), a.PodsMemory>>20)
		sys += a.SystemCPU - b.SystemCPU
		pods += a.PodsCPU - b.PodsCPU
		sysMem += a.SystemMemory
		podsMem += a.PodsMemory
	}
	t.Logf("all nodes at rest: containerd+kubelet+shims %.3f cores, %d MiB RSS; Pods %.3f cores, %d MiB RSS",
		float64(sys)/float64(window), sysMem>>20, float64(pods)/float64(window), podsMem>>20)
}
