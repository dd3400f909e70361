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
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The GVR TestRestartedServerRoutedAgain needs is served by exactly one
// kube-apiserver. On the package's plane the GVRs v1.37 adds are served by
// both v1.37.2 servers (and certificates.k8s.io/v1, off on v1.36.3, too),
// so the test turns on, on new2 only, a group-version off by default in
// both releases, with no feature gate.
const (
	rejoinGV   = "resource.k8s.io/v1beta2"
	rejoinPath = "/apis/" + rejoinGV + "/deviceclasses"
)

var rejoinGVR = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta2", Resource: "deviceclasses"}

// How fast the other servers route a GVR again to its only server once it
// is back (docs/testing.md, "How fast a server that is back is routed
// again", has the derivation; the plane runs peerdiscovery-apiserver with
// localcluster's --refresh-interval and --scrape-timeout, 2 s each).
//
// What routes a request to the server again is its APIServerPeer turning
// Ready in the view a filter reads (its routing tables never dropped it:
// readiness is on the APIServerPeer only). Each peerdiscovery-apiserver
// replica publishes its own view; a filter reads one of them.
//
//   - Restarted (SIGKILL, then started): its own /readyz holds until the
//     view its filter reads lists it Ready with its current discovery, plus
//     routableSettle (2 s) for the other filters' watches. A filter that
//     reads the other replica waits for that replica's own read of the
//     server: at once when the server's renewed Lease shows it rejoined (its
//     Lease lapsed) or its recorded list changed, else at that replica's
//     next read of a peer it lists not ready (engine.NotReadyRecheck, 1 s,
//     or --refresh-interval when shorter). The replica the server's filter
//     reads had read it before /readyz, so the other's read starts at the
//     latest min(refresh-interval, 1 s) after /readyz and ends within
//     --scrape-timeout: bound = min(refresh-interval, 1 s) +
//     scrape-timeout + rejoinMargin after /readyz (4 s on the plane; 7 s
//     with the shipped defaults, 10 s and 5 s).
//   - Frozen (SIGSTOP) until its Lease lapsed, thawed (SIGCONT): its
//     /readyz passed long ago and never fails again, so it answers at once
//     and says nothing about its peers. From SIGCONT its filter renews its
//     Lease within a renewal period (3 s; the overdue tick fires at once)
//     and every replica reads it at once (rejoined): bound = 3 s +
//     scrape-timeout + rejoinMargin after SIGCONT (6 s on the plane; 9 s
//     with the shipped defaults).
//
// Both bounds count a whole --scrape-timeout for the read, a read that
// hangs on a server that is back; a server that answers is read in
// milliseconds, which is what the chaos soak's detection grace counts
// (test/chaos DetectionGrace).
//
// rejoinMargin is what follows the replica's publish: the filters' watch
// events through their aggregator, their routing-table rebuild (at most
// one per 50 ms burst) and this test's 100 ms poll. A read that fails
// (the server did not answer a replica within --scrape-timeout although it
// was up) is not in the bound: that is a server that is not back.
const rejoinMargin = time.Second

var (
	boundRestarted = min(localcluster.DefaultRefreshInterval, engine.NotReadyRecheck) + localcluster.DefaultScrapeTimeout + rejoinMargin
	boundThawed    = peerlease.DefaultRenewInterval + localcluster.DefaultScrapeTimeout + rejoinMargin
)

// How often the test asks: the victim's /readyz at least every 100 ms
// (here 50), the GVR through each other server every 100 ms.
const (
	readyzPoll = 50 * time.Millisecond
	routePoll  = 100 * time.Millisecond
)

// TestRestartedServerRoutedAgain: a GVR's only server goes away (killed,
// then frozen) and comes back; through every other kube-apiserver a GET of
// the GVR answers 200 again within the bound after the server's own
// /readyz answers 200 (restarted) or after SIGCONT (thawed), and never 404
// meanwhile.
// servingAlone restarts server victim with rejoinGV turned on, so that it
// alone serves rejoinGVR, and puts it back as it was when the test ends.
func servingAlone(t *testing.T, victim int) {
	t.Helper()
	name, version := cluster.Servers()[victim].Name, cluster.Servers()[victim].Version
	planetest.KeepServersRunning(t, cluster, victim)
	t.Cleanup(func() {
		// As it was, for the tests after. Thawed first: a stopped process
		// keeps SIGTERM pending. SIGCONT to a running server does nothing;
		// to one that does not run it fails, which does not matter.
		_ = cluster.ThawAPIServer(victim)
		if err := cluster.StopAPIServer(victim, syscall.SIGTERM); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
		if err := cluster.UpgradeAPIServer(victim, localcluster.ServerSpec{Version: version}); err != nil {
			t.Errorf("starting %s as it was: %v", name, err)
		}
	})
	if err := cluster.StopAPIServer(victim, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.UpgradeAPIServer(victim, localcluster.ServerSpec{Version: version, ExtraFlags: []string{"--runtime-config=" + rejoinGV + "=true"}}); err != nil {
		t.Fatal(err)
	}
}

func TestRestartedServerRoutedAgain(t *testing.T) {
	ids := readyPlane(t)
	const victim = new2
	others := []int{old, new1}
	name := cluster.Servers()[victim].Name
	servingAlone(t, victim)
	for i, s := range cluster.Servers() {
		groups, _, _ := discovery(t, i, "/apis", true)
		if served := planetest.GVRs(groups)[rejoinGVR]; served != (i == victim) {
			t.Fatalf("%s serves %s: %v, want it served by %s only (the runtime-config this test needs is gone?)", s.Name, rejoinGVR, served, name)
		}
	}
	planetest.WaitFor(t, 2*time.Minute, rejoinPath+" routed to "+name+" through every other server", func() error {
		for _, i := range others {
			if code, _, b := planetest.Get(t, cluster.AdminConfig(i), rejoinPath+"?limit=1"); code != http.StatusOK {
				return fmt.Errorf("%s: %d %.200s", cluster.Servers()[i].Name, code, b)
			}
		}
		return nil
	})
	peer := compute.PeerName(ids[victim])

	// (a) Killed, started again.
	if err := cluster.StopAPIServer(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	down := waitUnrouted(t, peer, others, false)
	routes := pollRoutes(t, others)
	readyz := pollReadyz(t, victim)
	started := time.Now()
	if err := cluster.StartAPIServer(victim); err != nil {
		t.Fatal(err)
	}
	readyAt := readyz.wait(t, 30*time.Second)
	got := routes.wait(t, 2*time.Minute)
	t.Logf("killed: not ready on the replicas %v after the kill (%s); started again, /readyz 200 %v after the start",
		down.at.Sub(killed).Round(10*time.Millisecond), down.state, readyAt.Sub(started).Round(10*time.Millisecond))
	checkRouted(t, "restarted", got, readyAt, "its /readyz", boundRestarted)

	// (b) Frozen, thawed once its Lease lapsed: the other way back, the
	// renewal after a lapse (the restart above is usually quicker than the
	// Lease's 10 s, so the replicas only saw reads fail). The kill above
	// moved every client's connection through the load balancer off the
	// victim, so freezing it stalls no replica.
	if err := cluster.FreezeAPIServer(victim); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	down = waitUnrouted(t, peer, others, true)
	routes = pollRoutes(t, others)
	readyz = pollReadyz(t, victim)
	thawed := time.Now()
	if err := cluster.ThawAPIServer(victim); err != nil {
		t.Fatal(err)
	}
	readyAt = readyz.wait(t, 30*time.Second)
	got = routes.wait(t, 2*time.Minute)
	t.Logf("frozen: gone on the replicas %v after SIGSTOP (%s); thawed after %v frozen, /readyz 200 %v after SIGCONT",
		down.at.Sub(frozen).Round(10*time.Millisecond), down.state, thawed.Sub(frozen).Round(10*time.Millisecond), readyAt.Sub(thawed).Round(10*time.Millisecond))
	for _, i := range others {
		if r := got[i]; !r.at.IsZero() {
			t.Logf("  thawed, through %s: %v after its /readyz", cluster.Servers()[i].Name, r.at.Sub(readyAt).Round(10*time.Millisecond))
		}
	}
	checkRouted(t, "thawed", got, thawed, "SIGCONT", boundThawed)
}

// unrouted is when every replica listed the victim not ready, and how.
type unrouted struct {
	at    time.Time
	state string
}

// waitUnrouted waits until every peerdiscovery-apiserver replica (asked at
// its own address) lists the peer not ready (with left, gone: its Lease
// lapsed), and a GET of the GVR through each of others is refused (503;
// never 404).
func waitUnrouted(t *testing.T, peer string, others []int, left bool) unrouted {
	t.Helper()
	var out unrouted
	planetest.WaitFor(t, time.Minute, peer+" not ready on every replica", func() error {
		var states []string
		for i := range cluster.Extensions() {
			cfg := rest.CopyConfig(cluster.ExtensionConfig(i))
			cfg.Timeout = 2 * time.Second
			p, err := planetest.Client(t, cfg).PeerdiscoveryV1alpha1().APIServerPeers().Get(context.Background(), peer, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("replica %d: %v", i, err)
			}
			if planetest.Ready(p) {
				return fmt.Errorf("replica %d: still ready", i)
			}
			state := "not ready"
			if p.Status.LeftTime != nil {
				state = "left: its Lease lapsed"
			} else if left {
				return fmt.Errorf("replica %d: not ready, its Lease not lapsed yet", i)
			}
			states = append(states, fmt.Sprintf("replica %d %s", i, state))
		}
		out = unrouted{at: time.Now(), state: strings.Join(states, ", ")}
		return nil
	})
	for _, i := range others {
		cfg := rest.CopyConfig(cluster.AdminConfig(i))
		cfg.Timeout = 15 * time.Second
		if code, _, b := planetest.Get(t, cfg, rejoinPath+"?limit=1"); code != http.StatusServiceUnavailable {
			t.Fatalf("%s answered %s with %d %.300s while its only server is down, want 503", cluster.Servers()[i].Name, rejoinPath, code, b)
		}
	}
	return out
}

// routed is what one server answered for the GVR: when it first answered
// 200, and every other answer before.
type routed struct {
	at      time.Time
	answers map[string]int
	last    string
}

// routePoller GETs the GVR through each server until it answers 200.
type routePoller struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	got    map[int]*routed
}

// pollRoutes starts a GET of the GVR (a list, limit=1, with the test's
// client certificate) through each of servers every routePoll, each
// server's until it answers 200.
func pollRoutes(t *testing.T, servers []int) *routePoller {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &routePoller{cancel: cancel, got: map[int]*routed{}}
	for _, i := range servers {
		cfg := rest.CopyConfig(cluster.AdminConfig(i))
		cfg.Timeout = 5 * time.Second
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &routed{answers: map[string]int{}}
		p.got[i] = r
		url := cfg.Host + rejoinPath + "?limit=1"
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for ctx.Err() == nil {
				next := time.Now().Add(routePoll)
				code, body, err := getBody(ctx, client, url)
				now := time.Now()
				p.mu.Lock()
				if code == http.StatusOK {
					r.at = now
					p.mu.Unlock()
					return
				}
				answer := fmt.Sprint(code)
				if err != nil {
					answer, body = "error", err.Error()
				}
				r.answers[answer]++
				r.last = fmt.Sprintf("%s %.200s", answer, body)
				p.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(next)):
				}
			}
		}()
	}
	return p
}

// wait waits until every server answered 200, or timeout; then stops.
func (p *routePoller) wait(t *testing.T, timeout time.Duration) map[int]routed {
	t.Helper()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		p.cancel()
		<-done
	}
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int]routed{}
	for i, r := range p.got {
		out[i] = *r
	}
	return out
}

// getBody GETs url as JSON: the status and up to 1 KiB of the body.
func getBody(ctx context.Context, client *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, string(b), nil
}

// readyzPoller asks a server's /readyz every readyzPoll until it answers
// 200.
type readyzPoller struct {
	cancel context.CancelFunc
	done   chan struct{}
	at     time.Time
	last   string
}

func pollReadyz(t *testing.T, i int) *readyzPoller {
	t.Helper()
	cfg := rest.CopyConfig(cluster.AdminConfig(i))
	cfg.Timeout = time.Second
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &readyzPoller{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			next := time.Now().Add(readyzPoll)
			code, body, err := getBody(ctx, client, cfg.Host+"/readyz")
			if code == http.StatusOK {
				p.at = time.Now()
				return
			}
			p.last = fmt.Sprintf("%d %.200s %v", code, body, err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(next)):
			}
		}
	}()
	return p
}

// wait waits for the first 200 at most timeout, counted from now.
func (p *readyzPoller) wait(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cancel()
		<-p.done
	}
	if p.at.IsZero() {
		t.Fatalf("/readyz of %s did not answer 200 within %v; last: %s", cluster.Servers()[new2].Name, timeout, p.last)
	}
	return p.at
}

// checkRouted fails unless every server answered 200 within bound after
// from, and none answered 404 before.
func checkRouted(t *testing.T, what string, got map[int]routed, from time.Time, fromWhat string, bound time.Duration) {
	t.Helper()
	var servers []int
	for i := range got {
		servers = append(servers, i)
	}
	sort.Ints(servers)
	for _, i := range servers {
		r := got[i]
		s := cluster.Servers()[i]
		if n := r.answers[fmt.Sprint(http.StatusNotFound)]; n > 0 {
			t.Errorf("%s: %s answered 404 %d times for %s while its only server was away (a false 404)", what, s.Name, n, rejoinPath)
		}
		if r.at.IsZero() {
			t.Errorf("%s: %s never routed %s again (answers %v, last %s)", what, s.Name, rejoinPath, r.answers, r.last)
			continue
		}
		lag := r.at.Sub(from)
		t.Logf("%s, through %s (%s): routed again %v after %s (bound %v; answers before: %v)",
			what, s.Name, s.Version, lag.Round(10*time.Millisecond), fromWhat, bound, r.answers)
		if lag > bound {
			t.Errorf("%s: %s routed %s again %v after %s, over the bound %v (answers before: %v, last %s)",
				what, s.Name, rejoinPath, lag.Round(10*time.Millisecond), fromWhat, bound, r.answers, r.last)
		}
	}
}
