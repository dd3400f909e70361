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
	"fmt"
	"net/http"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestCrashThenEveryReplicaRestarts: every server of the v1.37-only
// StorageVersionMigrations crashes (SIGKILL: no departure is recorded),
// then every peerdiscovery-apiserver replica restarts while they are down
// (a rollout, a node drain). The replicas come back with no memory of the
// dead servers; what those served is in their registration Leases, so the
// old server answers 503, never 404, for the whole tombstone (Retry-After
// only while its view catches up with what the Leases record).
func TestCrashThenEveryReplicaRestarts(t *testing.T) {
	ids := readyPlane(t)
	planetest.KeepServersRunning(t, cluster, new1, new2)
	planetest.KeepExtensionsRunning(t, cluster)
	cfg := cluster.AdminConfig(old)

	crashed := time.Now()
	for _, i := range []int{new1, new2} {
		if err := cluster.StopAPIServer(i, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// Poll through the old server from the crash until shortly before
	// the tombstone can end (a Lease lapses at most 10 s after its
	// server's last renewal; the tombstone runs from the lapse).
	pollUntil := crashed.Add(tombstone - 10*time.Second)
	type poll struct {
		at   time.Duration
		code int
		// bad: what is wrong with a 503 (planetest.Check503).
		bad error
	}
	var mu sync.Mutex
	var polls []poll
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Now().Before(pollUntil) {
			code, h, body := planetest.Get(t, cfg, svmPath)
			p := poll{at: time.Since(crashed), code: code}
			if code == http.StatusServiceUnavailable {
				p.bad = planetest.Check503(h, body)
			}
			mu.Lock()
			polls = append(polls, p)
			mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	}()

	// Every replica restarts while the servers are down.
	for _, i := range allExtensions() {
		if err := cluster.StopExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	startExtensions(t, allExtensions()...)
	restarted := time.Since(crashed)
	// The restarted replicas' own view names the crashed servers as gone.
	planetest.WaitFor(t, time.Minute, "the restarted replicas publish the crashed servers as left", func() error {
		peers, err := pd(t, old).PeerdiscoveryV1alpha1().APIServerPeers().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		left := 0
		for _, p := range peers.Items {
			if (p.Spec.ServerID == ids[new1] || p.Spec.ServerID == ids[new2]) && p.Status.LeftTime != nil {
				left++
			}
		}
		if left != 2 {
			return fmt.Errorf("%d of 2 crashed servers listed as left", left)
		}
		return nil
	})
	published := time.Since(crashed)
	if r := review(t, old, "list", svmPath, ids[old]); r.Decision != v1alpha1.RouteUnavailable {
		t.Errorf("RouteReview after the replicas restarted: %s (%s), want Unavailable", r.Decision, r.Reason)
	}
	<-done

	mu.Lock()
	defer mu.Unlock()
	codes := map[int]int{}
	var after int
	for _, p := range polls {
		codes[p.code]++
		if p.at > published {
			after++
		}
		switch {
		case p.code == http.StatusNotFound:
			t.Errorf("false 404 at +%v", p.at.Round(100*time.Millisecond))
		case p.code != http.StatusServiceUnavailable:
			t.Errorf("%d at +%v, want 503", p.code, p.at.Round(100*time.Millisecond))
		case p.bad != nil:
			t.Errorf("at +%v: %v", p.at.Round(100*time.Millisecond), p.bad)
		}
	}
	var summary []string
	for c, n := range codes {
		summary = append(summary, fmt.Sprintf("%d×%d", n, c))
	}
	sort.Strings(summary)
	t.Logf("%d polls over %v after the crash: %v; replicas restarted at +%v, their view published at +%v, %d polls after that",
		len(polls), (tombstone - 10*time.Second), summary, restarted.Round(time.Second), published.Round(time.Second), after)
	if after < 20 {
		t.Errorf("only %d polls after the restarted replicas published their view: the restart took too long to check the tombstone", after)
	}
}
