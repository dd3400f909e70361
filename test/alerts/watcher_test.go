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

package alerts

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// episode is one stretch of an alert being active (pending or firing) in
// Prometheus, for any of its label sets.
type episode struct {
	// pending is Prometheus' activeAt: the evaluation that first found the
	// expression true.
	pending time.Time
	// firing is the first poll that saw it firing; resolved the first poll
	// after that without it; closed the first poll without it at all.
	firing, resolved, closed time.Time
	// instances are the label sets it fired for (alertname and severity
	// left out); value is the first firing value.
	instances []string
	value     string
}

// watcher polls Prometheus' /api/v1/alerts every second and records the
// episodes of each alert.
type watcher struct {
	p        *prometheus
	mu       sync.Mutex
	episodes map[string][]*episode
	polls    int
	errs     int
	lastErr  error
}

func newWatcher(p *prometheus) *watcher {
	return &watcher{p: p, episodes: map[string][]*episode{}}
}

// run polls until ctx is done (the test bounds it).
func (w *watcher) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		w.poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *watcher) poll() {
	now := time.Now()
	alerts, err := w.p.alerts()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if err != nil {
		w.errs++
		w.lastErr = err
		return
	}
	active := map[string][]promAlert{}
	for _, a := range alerts {
		active[a.Labels["alertname"]] = append(active[a.Labels["alertname"]], a)
	}
	for name, as := range active {
		ep := w.open(name)
		if ep == nil {
			ep = &episode{pending: as[0].ActiveAt}
			w.episodes[name] = append(w.episodes[name], ep)
		}
		for _, a := range as {
			if a.ActiveAt.Before(ep.pending) {
				ep.pending = a.ActiveAt
			}
			if a.State != "firing" {
				continue
			}
			if ep.firing.IsZero() {
				ep.firing, ep.value = now, a.Value
			}
			if id := instance(a.Labels); !contains(ep.instances, id) {
				ep.instances = append(ep.instances, id)
			}
		}
	}
	for name := range w.episodes {
		if ep := w.open(name); ep != nil && active[name] == nil {
			ep.closed = now
			if !ep.firing.IsZero() {
				ep.resolved = now
			}
		}
	}
}

// open is the alert's episode still going on, if any; w.mu is held.
func (w *watcher) open(name string) *episode {
	eps := w.episodes[name]
	if len(eps) == 0 || !eps[len(eps)-1].closed.IsZero() {
		return nil
	}
	return eps[len(eps)-1]
}

func instance(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		if k != "alertname" && k != "severity" {
			parts = append(parts, k+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// await polls the recorded episodes every 250ms until cond finds one, and
// fails the test after timeout.
func (w *watcher) await(t *testing.T, what string, timeout time.Duration, cond func() *episode) *episode {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		ep := cond()
		var snapshot episode
		if ep != nil {
			snapshot = *ep
		}
		errs, lastErr := w.errs, w.lastErr
		w.mu.Unlock()
		if ep != nil {
			return &snapshot
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (active: %s; %d failed polls of /api/v1/alerts, last: %v)", timeout, what, w.activeNames(), errs, lastErr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitFiring waits for the first episode of alert that fired after since.
func (w *watcher) waitFiring(t *testing.T, alert string, since time.Time, timeout time.Duration) *episode {
	t.Helper()
	return w.await(t, alert+" firing", timeout, func() *episode {
		for _, ep := range w.episodes[alert] {
			if !ep.firing.IsZero() && !ep.firing.Before(since) {
				return ep
			}
		}
		return nil
	})
}

// waitResolved waits until the episode of alert that fired at firing
// resolved.
func (w *watcher) waitResolved(t *testing.T, alert string, firing time.Time, timeout time.Duration) *episode {
	t.Helper()
	return w.await(t, alert+" resolved", timeout, func() *episode {
		for _, ep := range w.episodes[alert] {
			if ep.firing.Equal(firing) && !ep.resolved.IsZero() {
				return ep
			}
		}
		return nil
	})
}

// waitQuiet waits until no alert is pending or firing, for two
// evaluation intervals in a row.
func (w *watcher) waitQuiet(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var quietSince time.Time
	for {
		if names := w.activeNames(); names != "" {
			quietSince = time.Time{}
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for every alert to be inactive: %s", timeout, names)
			}
		} else if quietSince.IsZero() {
			quietSince = time.Now()
		} else if time.Since(quietSince) > 2*scrapeInterval {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// activeNames lists the alerts pending or firing now.
func (w *watcher) activeNames() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for name := range w.episodes {
		if ep := w.open(name); ep != nil {
			state := "pending"
			if !ep.firing.IsZero() {
				state = "firing"
			}
			names = append(names, fmt.Sprintf("%s (%s)", name, state))
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// peak is the highest value of the instant query q over the 4 minutes
// before at (a subquery at Prometheus' evaluation interval), as a
// percentage, for the log.
func (w *watcher) peak(t *testing.T, q string, at time.Time) string {
	t.Helper()
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
	v, err := w.p.queryVector(fmt.Sprintf("max_over_time((%s)[4m:%s])", q, scrapeInterval))
	if err != nil || len(v) != 1 {
		t.Logf("peak of %s: %v (%d series)", q, err, len(v))
		return "?"
	}
	f, err := strconv.ParseFloat(fmt.Sprint(v[0].Value[1]), 64)
	if err != nil {
		return fmt.Sprint(v[0].Value[1])
	}
	return fmt.Sprintf("%.1f %%", 100*f)
}

// all returns a copy of every alert's episodes.
func (w *watcher) all() map[string][]episode {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]episode{}
	for name, eps := range w.episodes {
		for _, ep := range eps {
			out[name] = append(out[name], *ep)
		}
	}
	return out
}
