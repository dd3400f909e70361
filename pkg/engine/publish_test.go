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

package engine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// TestPublishSkipsOnlyUnchangedInput drives publish through random changes
// of everything it reads: any field of any peer (found by reflection, so a
// field added to compute.Peer is changed here too), peers joining and
// going, cluster-wide and deleted group-versions, a recorded list renewed
// unchanged, and time. Invariants after every step: the last published
// view is the one the current input computes to (a skipped publish never
// leaves a stale view), and a step that changed nothing publishes only
// when the heartbeat is due (half a refresh interval after the last);
// peerdiscovery_publish_decisions_total counts each step's outcome.
func TestPublishSkipsOnlyUnchangedInput(t *testing.T) {
	registerMetrics()
	decisions := func() (published, unchanged float64) {
		var err error
		if published, err = testutil.GetCounterMetricValue(publishDecisions.WithLabelValues("published")); err != nil {
			t.Fatal(err)
		}
		if unchanged, err = testutil.GetCounterMetricValue(publishDecisions.WithLabelValues("unchanged")); err != nil {
			t.Fatal(err)
		}
		return published, unchanged
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	clk := testingclock.NewFakeClock(t0)
	pub := newRecordingPublisher()
	e := &Engine{
		opts: testOptions(), clock: clk, publisher: pub,
		peers: map[string]*peerState{}, lastClusterWide: map[schema.GroupVersion]string{}, deletedGVs: map[schema.GroupVersion]bool{},
	}
	heartbeat := e.opts.RefreshInterval / 2
	var lastAt time.Time
	skipped := 0
	for step := range 3000 {
		what, touched := changeInput(t, rng, e, clk)
		published := pub.count()
		counted, countedUnchanged := decisions()
		if err := e.publish(); err != nil {
			t.Fatalf("step %d (%s): publish: %v", step, what, err)
		}
		did := pub.count() > published
		if p, u := decisions(); did && (p != counted+1 || u != countedUnchanged) || !did && (p != counted || u != countedUnchanged+1) {
			t.Fatalf("step %d (%s): published %t, but the decisions counted went from %v published, %v unchanged to %v, %v", step, what, did, counted, countedUnchanged, p, u)
		}
		due := lastAt.IsZero() || clk.Since(lastAt) >= heartbeat
		if !touched && did && !due {
			t.Fatalf("step %d (%s): published though nothing changed and the last view is %s old", step, what, clk.Since(lastAt))
		}
		if !touched && !did && due {
			t.Fatalf("step %d (%s): no heartbeat %s after the last view", step, what, clk.Since(lastAt))
		}
		if did {
			lastAt = clk.Now()
		} else {
			skipped++
		}
		want, err := compute.Compute(inputOf(e))
		if err != nil {
			t.Fatal(err)
		}
		if got := pub.since(pub.count() - 1)[0]; !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (%s): the published view is not the current input's:\n%s\nwant\n%s", step, what, describe(got), describe(want))
		}
	}
	t.Logf("%d of 3000 steps published nothing", skipped)
	if skipped == 0 {
		t.Error("no step skipped a publish")
	}
}

// inputOf builds publish's input independently of publish.
func inputOf(e *Engine) compute.Input {
	in := compute.Input{ClusterWide: e.lastClusterWide}
	for _, p := range e.peers {
		in.Peers = append(in.Peers, p.Peer)
	}
	deleted := e.deletedGVs
	in.Excluded = func(g, v string) bool { return deleted[schema.GroupVersion{Group: g, Version: v}] }
	return in
}

// changeInput makes one random change as the engine's own code would (new
// maps and documents, never one changed in place) and says what, and
// whether it touched the input.
func changeInput(t *testing.T, rng *rand.Rand, e *Engine, clk *testingclock.FakeClock) (string, bool) {
	ids := make([]string, 0, len(e.peers))
	for id := range e.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	gv := schema.GroupVersion{Group: fmt.Sprintf("g%d.example.com", rng.IntN(4)), Version: "v1"}
	switch k := rng.IntN(10); {
	case k == 0:
		return "nothing", false
	case k == 1:
		d := time.Duration(rng.Int64N(int64(e.opts.RefreshInterval / 4)))
		clk.Step(d)
		return fmt.Sprintf("%s later", d), false
	case k == 2 || len(ids) == 0:
		id := fmt.Sprintf("server-%d", rng.IntN(5))
		e.peers[id] = &peerState{Peer: compute.Peer{ServerID: id, Endpoint: id + ":6443", HasDocument: true, APIs: randomDocument(rng)}}
		return "peer " + id + " joined or was replaced", true
	case k == 3:
		delete(e.peers, ids[0])
		return "peer " + ids[0] + " went", true
	case k == 4:
		cw := map[schema.GroupVersion]string{}
		for g, s := range e.lastClusterWide {
			cw[g] = s
		}
		if _, ok := cw[gv]; ok {
			delete(cw, gv)
		} else {
			cw[gv] = compute.SourceCRD
		}
		e.lastClusterWide = cw
		return "cluster-wide " + gv.String(), true
	case k == 5:
		if e.deletedGVs[gv] {
			delete(e.deletedGVs, gv)
		} else {
			e.deletedGVs[gv] = true
		}
		return "deleted " + gv.String(), true
	case k == 6:
		// A renewal that records the same list (decoded anew) keeps the
		// documents: nothing changes.
		p := e.peers[ids[rng.IntN(len(ids))]]
		if p.Recorded {
			p.useRecordedList(slices.Clone(p.recordedFrom))
			return "the same recorded list of " + p.ServerID, false
		}
		p.HasDocument = false
		p.useRecordedList([]peerlease.ServedResource{{GroupVersionResource: gv.WithResource("things"), Scope: "Namespaced"}})
		return "a recorded list for " + p.ServerID, true
	default:
		p := e.peers[ids[rng.IntN(len(ids))]]
		field := changeField(t, rng, &p.Peer)
		return field + " of " + p.ServerID, true
	}
}

// changeField sets one random field of p to a different value.
func changeField(t *testing.T, rng *rand.Rand, p *compute.Peer) string {
	v := reflect.ValueOf(p).Elem()
	i := rng.IntN(v.NumField())
	f, name := v.Field(i), v.Type().Field(i).Name
	switch x := f.Addr().Interface().(type) {
	case *string:
		*x += "x"
	case *bool:
		*x = !*x
	case *time.Time:
		*x = x.Add(time.Duration(1+rng.IntN(1000)) * time.Millisecond)
		if x.Before(t0) {
			*x = t0
		}
	case *[]v1alpha1.PeerSource:
		all := []v1alpha1.PeerSource{v1alpha1.PeerSourceEndpointSlice, v1alpha1.PeerSourceIdentityLease, v1alpha1.PeerSourceRegistrationLease}
		next := all[:1+rng.IntN(len(all))]
		if slices.Equal(next, *x) {
			next = all[len(all)-1:]
		}
		*x = next
	case *[]apidiscoveryv2.APIGroupDiscovery:
		*x = randomDocument(rng)
	default:
		t.Fatalf("no way to change compute.Peer's field %s (%s): teach changeField", name, f.Type())
	}
	return name
}

// randomDocument is a new document of one to three groups.
func randomDocument(rng *rand.Rand) []apidiscoveryv2.APIGroupDiscovery {
	var doc []apidiscoveryv2.APIGroupDiscovery
	for g := range 1 + rng.IntN(3) {
		name := fmt.Sprintf("g%d.example.com", (g+rng.IntN(4))%4)
		if slices.ContainsFunc(doc, func(d apidiscoveryv2.APIGroupDiscovery) bool { return d.Name == name }) {
			continue
		}
		doc = append(doc, grp(name, ver("v1", strings.Repeat("r", 1+rng.IntN(3)))))
	}
	return doc
}
