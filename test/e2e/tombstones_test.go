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

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestTombstonesSurviveReplicaRestarts: both v1.37.2 servers leave
// gracefully; the extension replicas restart one at a time, then both at
// once. Throughout, the v1.36.3 server answers 503 (never 404; no
// Retry-After: its servers left) for a v1.37-only resource, and the replicas agree: the departures
// are in the API (the registration Leases), not in one replica's memory.
// Each peer transition is one Event, which kubectl describe lists.
func TestTombstonesSurviveReplicaRestarts(t *testing.T) {
	ids := readyPlane(t)
	planetest.KeepExtensionsRunning(t, cluster)
	planetest.KeepServersRunning(t, cluster, new1, new2)
	mark := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	// Earlier tests may have moved these peers too: a replica's recorder
	// counts a repeated Event (same reason and message) on the same
	// object, so what counts is the increase from here.
	before := map[int]map[string]int{}
	for _, i := range []int{new1, new2} {
		events, err := peerEvents(compute.PeerName(ids[i]))
		if err != nil {
			t.Fatal(err)
		}
		before[i] = map[string]int{}
		for _, e := range events {
			before[i][e.Name] = eventCount(e)
		}
	}
	for _, i := range []int{new1, new2} {
		if err := cluster.StopAPIServer(i, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	cfg := cluster.AdminConfig(old)
	var mu sync.Mutex
	codes := map[int]int{}
	var bad []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Since(stopped) < tombstone-15*time.Second {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			code, h, body := planetest.Get(t, cfg, svmPath)
			mu.Lock()
			codes[code]++
			if code != http.StatusServiceUnavailable {
				bad = append(bad, fmt.Sprintf("%s after the stop: %d %q", time.Since(stopped).Round(time.Millisecond), code, body))
			} else if err := planetest.Check503(h, body); err != nil {
				bad = append(bad, fmt.Sprintf("%s after the stop: %v", time.Since(stopped).Round(time.Millisecond), err))
			}
			mu.Unlock()
		}
	}()
	restartExtension(t, 0)
	restartExtension(t, 1)
	for i := range cluster.Extensions() {
		if err := cluster.StopExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	startExtensions(t, allExtensions()...)
	waitReplicasAgree(t)
	ctx := context.Background()
	// The fresh replicas learnt both departures from the Leases.
	prt, err := pd(t, old).PeerdiscoveryV1alpha1().PeerRoutingTables().Get(ctx, compute.RouteName(svm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	for _, p := range prt.Status.Peers {
		if p.Left {
			left++
		}
	}
	// Left servers are never ready (v1alpha1.PeerReady).
	if left != 2 || len(prt.Status.Peers) != 2 {
		t.Fatalf("routing table of %s after both replicas restarted: %+v, want both v1.37.2 servers left", svm, prt.Status)
	}
	elapsed := time.Since(stopped)
	close(done)
	wg.Wait()
	mu.Lock()
	t.Logf("GET %s through v1.36.3 for %s while the replicas restarted: %v", svmPath, elapsed.Round(time.Second), codes)
	if len(bad) > 0 {
		t.Fatalf("not the filter's 503 (%d times), e.g. %s", len(bad), bad[0])
	}
	mu.Unlock()
	if codes[http.StatusServiceUnavailable] == 0 || elapsed > tombstone-15*time.Second {
		t.Fatalf("inconclusive: %v 503s, restarts took %s of the %s tombstone", codes[http.StatusServiceUnavailable], elapsed, tombstone)
	}

	for _, i := range []int{new1, new2} {
		if err := cluster.StartAPIServer(i); err != nil {
			t.Fatal(err)
		}
	}
	waitReadyPeer(t, ids[new1])
	waitReadyPeer(t, ids[new2])
	waitReplicasAgree(t)

	// One Event per transition, on the real object.
	for _, i := range []int{new1, new2} {
		name := compute.PeerName(ids[i])
		want := []string{engine.ReasonLeft, engine.ReasonJoined, engine.ReasonReady}
		planetest.WaitFor(t, time.Minute, "one Event per transition of "+name, func() error {
			return eventsOnce(name, mark, before[i], want)
		})
		out, err := cluster.Kubectl("describe", "apiserverpeer", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range want {
			if !strings.Contains(out, r) {
				t.Fatalf("kubectl describe apiserverpeer %s lists no %s Event:\n%s", name, r, out)
			}
		}
	}
}

// peerEvents lists the Events about APIServerPeer name.
func peerEvents(name string) ([]corev1.Event, error) {
	out, err := cluster.Kubectl("get", "events", "-A", "-o", "json",
		"--field-selector", "involvedObject.kind=APIServerPeer,involvedObject.name="+name)
	if err != nil {
		return nil, err
	}
	var l corev1.EventList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// eventCount is how many times an Event was recorded.
func eventCount(e corev1.Event) int {
	return max(int(e.Count), 1)
}

// eventsOnce checks that the Events about APIServerPeer name since mark
// are exactly one per reason in want, each counted once: a new Event, or
// one counted once more than before (by Event name) says.
func eventsOnce(name string, mark time.Time, before map[string]int, want []string) error {
	events, err := peerEvents(name)
	if err != nil {
		return err
	}
	got := map[string]int{}
	var all []string
	for _, e := range events {
		if e.LastTimestamp.Time.Before(mark) && e.EventTime.Time.Before(mark) {
			continue
		}
		n := eventCount(e) - before[e.Name]
		if n == 0 {
			continue
		}
		got[e.Reason] += n
		all = append(all, fmt.Sprintf("%s×%d from %s: %s", e.Reason, n, e.Source.Host, e.Message))
		if e.InvolvedObject.UID == "" || e.InvolvedObject.APIVersion != v1alpha1.SchemeGroupVersion.String() {
			return fmt.Errorf("event %s regards %+v, not the real object", e.Name, e.InvolvedObject)
		}
	}
	for _, r := range want {
		if got[r] != 1 {
			return fmt.Errorf("%s: %d %s Events, want 1 (all since %s: %q)", name, got[r], r, mark, all)
		}
	}
	return nil
}
