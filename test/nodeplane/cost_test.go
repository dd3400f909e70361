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

// The node machinery's budget at rest, per node: containerd, the kubelet
// and the shims. Measured on three nodes: 0.06 cores and 146 MiB of
// anonymous memory in all (docs/reports/node-plane.md, "Cost at rest");
// the bounds leave room for a busy CI machine and catch a kubelet or
// containerd that spins or grows (an order of magnitude).
const (
	nodeSystemCPUBudget    = 0.25 // cores
	nodeSystemMemoryBudget = 256 << 20
)

// TestNodeCost measures what the nodes cost at rest: CPU over 10 s and
// resident memory, of each node's containerd, kubelet and shims, and of its
// Pods. Each node's machinery stays within its budget, and the readings are
// real: every node's Pods and machinery used CPU in the window and hold
// memory.
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
	if len(after) == 0 || len(after) != len(before) {
		t.Fatalf("usage of %d nodes, then %d", len(before), len(after))
	}
	cores := func(d time.Duration) float64 { return float64(d) / float64(window) }
	var sys, pods time.Duration
	var sysMem, podsMem int64
	for i, a := range after {
		b := before[i]
		t.Logf("%s at rest: containerd+kubelet+shims %.3f cores, %d MiB RSS; Pods %.3f cores, %d MiB RSS",
			a.Name, cores(a.SystemCPU-b.SystemCPU), a.SystemMemory>>20, cores(a.PodsCPU-b.PodsCPU), a.PodsMemory>>20)
		if a.SystemCPU <= b.SystemCPU || a.PodsCPU <= b.PodsCPU || a.SystemMemory <= 0 || a.PodsMemory <= 0 {
			t.Errorf("%s: a reading that cannot be (no CPU used in %v, or no memory): %+v then %+v", a.Name, window, b, a)
		}
		if c := cores(a.SystemCPU - b.SystemCPU); c > nodeSystemCPUBudget {
			t.Errorf("%s: containerd, kubelet and shims used %.3f cores at rest, over the budget of %.2f", a.Name, c, nodeSystemCPUBudget)
		}
		if a.SystemMemory > nodeSystemMemoryBudget {
			t.Errorf("%s: containerd, kubelet and shims hold %d MiB, over the budget of %d MiB", a.Name, a.SystemMemory>>20, nodeSystemMemoryBudget>>20)
		}
		sys += a.SystemCPU - b.SystemCPU
		pods += a.PodsCPU - b.PodsCPU
		sysMem += a.SystemMemory
		podsMem += a.PodsMemory
	}
	t.Logf("all nodes at rest: containerd+kubelet+shims %.3f cores, %d MiB RSS; Pods %.3f cores, %d MiB RSS",
		cores(sys), sysMem>>20, cores(pods), podsMem>>20)
}
