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

package peerdiscovery

import (
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

// The view's age is what the PeerdiscoveryDiscoveryStale alert reads: a
// leader sets it when it publishes, a follower when it hears from the
// leader, and /readyz fails past staleAfter on the same clock.
func TestViewLastUpdateMetric(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	leader := NewViewStore(2*time.Minute, clk, false)
	defer leader.Stop()
	if err := leader.Publish(compute.Output{}); err != nil {
		t.Fatal(err)
	}
	if got, err := testutil.GetGaugeMetricValue(viewUpdated); err != nil || got != 1_800_000_000 {
		t.Fatalf("after publish: %v %v", got, err)
	}
	if err := leader.ReadyzCheck().Check(nil); err != nil {
		t.Fatalf("fresh view unready: %v", err)
	}
	clk.SetTime(clk.Now().Add(3 * time.Minute))
	if err := leader.ReadyzCheck().Check(nil); err == nil {
		t.Fatal("a view 3 minutes old is ready")
	}

	follower := NewViewStore(2*time.Minute, clk, true)
	defer follower.Stop()
	follower.MarkReplicated()
	if got, _ := testutil.GetGaugeMetricValue(viewUpdated); got != 1_800_000_180 {
		t.Fatalf("after word from the leader: %v", got)
	}
}
