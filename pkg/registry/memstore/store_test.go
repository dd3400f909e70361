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

package memstore

import (
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

func TestTestTypesAreRuntimeObjects(t *testing.T) {
	s := newTestScheme()
	for _, o := range []runtime.Object{&Widget{}, &WidgetList{}, &RouteTable{}, &RouteTableList{}} {
		if _, _, err := s.ObjectKinds(o); err != nil {
			t.Errorf("%T: %v", o, err)
		}
	}
}

func TestClock(t *testing.T) {
	for i := 0; i < 50; i++ {
		c := NewClock()
		if e := c.Epoch(); e == 0 || e > epochMask {
			t.Fatalf("epoch %d outside 1..2^30-1", e)
		}
		if c.Current() == 0 || !c.owns(c.Current()) {
			t.Fatalf("initial Current %d must be non-zero and owned", c.Current())
		}
	}
	c := newClockWithEpoch(testEpoch)
	prev := c.Current()
	for i := 0; i < 100; i++ {
		c.mu.Lock()
		rv := c.nextLocked()
		c.mu.Unlock()
		if rv <= prev || rv != c.Current() || !c.owns(rv) || rv>>62 != 0 {
			t.Fatalf("rv %d after %d: not monotonic/owned/below 2^62", rv, prev)
		}
		prev = rv
	}
	if c.owns(uint64(otherEpoch)<<32|5) || c.owns(5) {
		t.Fatal("foreign RVs reported as owned")
	}
}

func TestSharedClockAcrossStores(t *testing.T) {
	clock := newClockWithEpoch(testEpoch)
	a := newWidgetStore(t, func(c *Config) { c.Clock = clock })
	b := newWidgetStore(t, func(c *Config) { c.Clock = clock })
	a.Replace(objs(wid("x", "red")))
	la := listWidgets(t, a, nil)
	b.Replace(objs(wid("y", "red")))
	if b.ResourceVersion() <= a.ResourceVersion() {
		t.Fatal("RVs not monotonic across stores of one clock")
	}
	lb := listWidgets(t, a, nil)
	if listRV(t, lb) <= listRV(t, la) {
		t.Fatal("list RV did not follow the shared clock")
	}
	a.Replace(objs(wid("x", "blue")))
	// Watching a from either list RV sees exactly a's one later change.
	for _, l := range []*WidgetList{la, lb} {
		w := startWatch(t, a, &metainternalversion.ListOptions{ResourceVersion: l.ResourceVersion})
		expectEvents(t, w, ev{watch.Modified, "x", "blue"})
	}
}
