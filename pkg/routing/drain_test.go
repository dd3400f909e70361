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

package routing

import (
	"fmt"
	"testing"
)

func TestWhatIfDrained(t *testing.T) {
	all := gvr("", "v1", "pods")
	newOnly := gvr("storagemigration.k8s.io", "v1beta1", "storageversionmigrations")
	bOnly := gvr("example.com", "v1", "widgets")
	alreadyDown := gvr("example.com", "v1", "gadgets")
	cw := gvr("apiextensions.example", "v1", "things")
	table := newTable(
		rt(all, withPeers(ready("a"), ready("b"), ready("c")), servedByAll),
		rt(newOnly, withPeers(ready("b"), ready("c"))),
		rt(bOnly, withPeers(ready("b"))),
		rt(alreadyDown, withPeers(notReady("d"))),
		rt(cw, withPeers(ready("b")), clusterWide("CustomResourceDefinition")),
	)
	servers := []string{"a", "b", "c"}
	for _, tc := range []struct {
		drained     []string
		unavailable string
		failOver    string
	}{
		{drained: []string{"a"}, unavailable: "[]", failOver: "[]"},
		{drained: []string{"b"},
			unavailable: "[example.com/v1, Resource=widgets map[a: c:]]",
			failOver:    "[storagemigration.k8s.io/v1beta1, Resource=storageversionmigrations map[a:c]]"},
		{drained: []string{"c"},
			unavailable: "[]",
			failOver:    "[storagemigration.k8s.io/v1beta1, Resource=storageversionmigrations map[a:b]]"},
		{drained: []string{"b", "c"},
			unavailable: "[example.com/v1, Resource=widgets map[a:] storagemigration.k8s.io/v1beta1, Resource=storageversionmigrations map[a:]]",
			failOver:    "[]"},
		{drained: []string{"unknown"}, unavailable: "[]", failOver: "[]"},
	} {
		t.Run(fmt.Sprint(tc.drained), func(t *testing.T) {
			d := WhatIfDrained(&Snapshot{Table: table}, testNow, servers, tc.drained...)
			if got := fmt.Sprint(flat(d.Unavailable)); got != tc.unavailable {
				t.Errorf("unavailable: got %s, want %s", got, tc.unavailable)
			}
			if got := fmt.Sprint(flat(d.FailOver)); got != tc.failOver {
				t.Errorf("fail over: got %s, want %s", got, tc.failOver)
			}
		})
	}
}

// A tombstoned server is no source of requests, and a route whose only
// other server is already a tombstone is not made unavailable by a drain.
func TestWhatIfDrainedTombstones(t *testing.T) {
	g := gvr("example.com", "v1", "widgets")
	table := newTable(rt(g, withPeers(left("a"), ready("b"))))
	d := WhatIfDrained(&Snapshot{Table: table}, testNow, []string{"a", "b", "c"}, "b")
	if got := fmt.Sprint(flat(d.Unavailable)); got != "[example.com/v1, Resource=widgets map[c:]]" {
		t.Errorf("unavailable: %s", got)
	}
}

func TestWithoutLeavesTableUnchanged(t *testing.T) {
	g := gvr("example.com", "v1", "widgets")
	table := newTable(rt(g, withPeers(ready("a"), ready("b"))))
	after := table.Without("a")
	if p := table.Lookup(g).Peers[0]; !p.Ready || p.Left {
		t.Fatalf("original changed: %+v", p)
	}
	if p := after.Lookup(g).Peers[0]; p.Ready || !p.Left {
		t.Fatalf("drained peer: %+v", p)
	}
	if r := decide(after, Request{IsResourceRequest: true, GVR: g}, "c", nil); r.Decision != "Proxy" || r.Candidates[0].ID != "b" {
		t.Fatalf("after drain: %+v", r)
	}
	if len(after.byGV[g.GroupVersion()]) != 1 {
		t.Fatalf("byGV: %v", after.byGV)
	}
}

func flat(rs []DrainedRoute) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, fmt.Sprint(r.GVR, " ", r.From))
	}
	return out
}
