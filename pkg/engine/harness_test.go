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
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	aggfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
	testingclock "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// waitTimeout bounds every wait for the engine: generous, since the
// machine may be busy; never a measure of speed.
const waitTimeout = 60 * time.Second

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// ---- the recording publisher ----

// recordingPublisher keeps every View; safe for concurrent use.
type recordingPublisher struct {
	mu     sync.Mutex
	views  []compute.Output
	notify chan struct{}
}

var _ Publisher = &recordingPublisher{}

func newRecordingPublisher() *recordingPublisher {
	return &recordingPublisher{notify: make(chan struct{})}
}

func (r *recordingPublisher) Publish(v compute.Output) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.views = append(r.views, v)
	close(r.notify)
	r.notify = make(chan struct{})
	return nil
}

func (r *recordingPublisher) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.views)
}

// since returns the views published from index n on.
func (r *recordingPublisher) since(n int) []compute.Output {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.views[n:])
}

// waitFor waits until the latest view satisfies pred and returns it.
func (r *recordingPublisher) waitFor(t *testing.T, what string, pred func(compute.Output) bool) compute.Output {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		var last *compute.Output
		if len(r.views) > 0 {
			last = &r.views[len(r.views)-1]
		}
		ch := r.notify
		r.mu.Unlock()
		if last != nil && pred(*last) {
			return *last
		}
		select {
		case <-ch:
		case <-deadline.C:
			if last == nil {
				t.Fatalf("timed out waiting for %s: nothing published", what)
			}
			t.Fatalf("timed out waiting for %s; last view:\n%s", what, describe(*last))
		}
	}
}

// waitForTimer is waitFor for a view the engine publishes when a timer of
// its fires, with the fake clock moved on by 10 ms every 50 ms meanwhile:
// a fake timer armed for a time the clock has already passed (the engine
// armed it just after the test moved the clock) fires only when the clock
// moves again, where a real one fires at once.
func (h *harness) waitForTimer(what string, pred func(compute.Output) bool) compute.Output {
	h.t.Helper()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				h.clk.Step(10 * time.Millisecond)
			}
		}
	}()
	return h.pub.waitFor(h.t, what, pred)
}

// newEngine completes cfg and builds the engine.
func newEngine(cfg Config) (*Engine, error) {
	cc, err := cfg.Complete()
	if err != nil {
		return nil, err
	}
	return cc.New()
}

// ---- the harness ----

type harness struct {
	t       *testing.T
	opts    Options
	kube    *fake.Clientset
	ext     *extfake.Clientset
	agg     *aggfake.Clientset
	clk     *testingclock.FakeClock
	scraper *fakeScraper
	pub     *recordingPublisher
	rec     *record.FakeRecorder
	eng     *Engine
	events  []string
	done    chan error
	cancel  context.CancelFunc
}

type seed struct {
	kube []runtime.Object
	ext  []runtime.Object
	agg  []runtime.Object
}

func testOptions() Options {
	o := NewOptions()
	o.ScrapeTimeout = 30 * time.Second // never reached unless a test hangs a scrape
	o.RefreshInterval = 10 * time.Second
	o.TombstonePeriod = 5 * time.Minute
	o.IdentityLeaseStaleAfter = 45 * time.Second
	return *o
}

// newHarness builds the engine over fake clients holding the seed objects.
// Script the scraper before calling start.
func newHarness(t *testing.T, opts Options, s seed) *harness {
	t.Helper()
	h := &harness{
		t: t, opts: opts,
		kube:    fake.NewClientset(s.kube...),
		ext:     extfake.NewClientset(s.ext...),
		agg:     aggfake.NewClientset(s.agg...),
		clk:     testingclock.NewFakeClock(t0),
		scraper: newFakeScraper(),
		pub:     newRecordingPublisher(),
		rec:     record.NewFakeRecorder(10000),
	}
	clients := Clients{Kube: h.kube, APIExtensions: h.ext, Aggregator: h.agg}
	eng, err := newEngine(Config{Options: opts, Clients: clients, Publisher: h.pub, Scrape: h.scraper.Scrape, Heartbeat: h.scraper.Heartbeat, Clock: h.clk})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	eng.recorder = h.rec
	h.eng = eng
	return h
}

func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.eng.Run(ctx) }()
	h.t.Cleanup(h.stop)
	// The ticker exists once the informers synced; ticks need it.
	poll.Eventually(h.t, "the engine's refresh ticker", h.clk.HasWaiters)
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		h.t.Error("Run did not return after its context ended")
	}
}

// setTimeWithLeaseTraffic moves the fake clock to at, as a real cluster's
// other kube-system Leases (schedulers, controller managers, identity
// Leases) keep renewing every few seconds meanwhile: the engine hears its
// Lease watch at the new time, so it judges lapses at once
// (lapseJudgeTime) rather than as if its watch were stuck.
func (h *harness) setTimeWithLeaseTraffic(at time.Time) {
	h.t.Helper()
	h.clk.SetTime(at)
	leases := h.kube.CoordinationV1().Leases(peerlease.Namespace)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: peerlease.Namespace}}
	l.Spec.RenewTime = &metav1.MicroTime{Time: at}
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = leases.Create(context.Background(), l, metav1.CreateOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
	} else if err != nil {
		h.t.Fatal(err)
	}
	poll.Eventually(h.t, "the engine heard its Lease watch", func() bool { return h.eng.leaseHeard.Load() == at.UnixNano() })
}

// handled waits until Run handled an event after turn (h.eng.turns read
// before the event): it publishes only what changed, so a view need not
// follow.
func (h *harness) handled(what string, turn uint64) {
	h.t.Helper()
	poll.Eventually(h.t, what, func() bool { return h.eng.turns.Load() > turn })
}

// tick moves the fake clock one refresh interval on, which fires a refresh.
func (h *harness) tick() { h.clk.Step(h.opts.RefreshInterval) }

// refresh fires one refresh and waits until endpoint was scraped again
// (one tick makes the engine read every peer: idle ones at once, busy ones
// as soon as their scrape ends).
func (h *harness) refresh(endpoint string) {
	h.t.Helper()
	before := len(h.scraper.callsTo(endpoint))
	h.tick()
	h.waitCalls(endpoint, before+1)
}

// waitCalls waits until endpoint was scraped at least n times.
func (h *harness) waitCalls(endpoint string, n int) []scrapeCall {
	h.t.Helper()
	var calls []scrapeCall
	poll.Until(h.t, 5*time.Millisecond, waitTimeout, fmt.Sprintf("%d scrapes of %s", n, endpoint), func() error {
		if calls = h.scraper.callsTo(endpoint); len(calls) < n {
			return fmt.Errorf("scraped %d times", len(calls))
		}
		return nil
	})
	return calls
}

// drainEvents moves the recorded events into h.events and returns them.
func (h *harness) drainEvents() []string {
	for {
		select {
		case e := <-h.rec.Events:
			h.events = append(h.events, e)
		default:
			return h.events
		}
	}
}

// eventsFor returns "Type Reason" of the events about one peer, in order.
func (h *harness) eventsFor(id string) []string {
	var out []string
	for _, e := range h.drainEvents() {
		if strings.Contains(e, "Peer "+id+" ") {
			f := strings.Fields(e)
			out = append(out, f[0]+" "+f[1])
		}
	}
	return out
}
