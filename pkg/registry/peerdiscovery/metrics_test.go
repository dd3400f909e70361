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

// The view's age is what the PeerdiscoveryDiscoveryStale alert reads: set
// when a view is published, on the clock /readyz measures with.
func TestViewLastUpdateMetric(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	stores := NewStores()
	defer stores.Stop()
	p := NewPublisher(stores, clk)
	if !p.LastPublished().IsZero() {
		t.Fatal("published before any view")
	}
	if err := p.Publish(compute.Output{}); err != nil {
		t.Fatal(err)
	}
	if got, err := testutil.GetGaugeMetricValue(viewUpdated); err != nil || got != 1_800_000_000 {
		t.Fatalf("after publish: %v %v", got, err)
	}
	if !p.LastPublished().Equal(clk.Now()) {
		t.Fatalf("last published %v, want %v", p.LastPublished(), clk.Now())
	}
}
