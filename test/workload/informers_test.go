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

package workload

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestInformerClock(t *testing.T) {
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	const bound = 90 * time.Second
	cases := []struct {
		name      string
		openAtRun bool      // a list or watch was open when the check began
		first     time.Time // the reflector's first request since (zero: none)
		now       time.Time
		started   bool
		from      time.Time
		expired   bool
	}{
		{name: "watch open: counts from the check's start", openAtRun: true, now: at(90.5), started: true, from: start, expired: true},
		{name: "watch open, within the bound", openAtRun: true, now: at(89), started: true, from: start},
		// Seed 9157's informer: its reflector's next request came 38 s
		// after the check began; 90 s from the start would have ended the
		// check before its relist.
		{name: "backing off: waits for the first request", now: at(37), started: false, from: start},
		{name: "first request at 38 s", first: at(38), now: at(100), started: true, from: at(38)},
		{name: "first request at 38 s, bound passed", first: at(38), now: at(128.5), started: true, from: at(38), expired: true},
		// A reflector that made no request within client-go's longest
		// backoff: the clock starts anyway, so silence cannot pass.
		{name: "no request within the longest backoff", now: at(60), started: true, from: at(60)},
		{name: "no request, bound passed", now: at(150.5), started: true, from: at(60), expired: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := informerClock{started: tc.openAtRun, from: start}
			c.advance(tc.first, start, tc.now)
			if c.started != tc.started || !c.from.Equal(tc.from) {
				t.Fatalf("clock = started %v from %s, want started %v from %s", c.started, c.from.Sub(start), tc.started, tc.from.Sub(start))
			}
			if got := c.expired(bound, tc.now); got != tc.expired {
				t.Errorf("expired at %s = %v, want %v", tc.now.Sub(start), got, tc.expired)
			}
			// A later request does not move a started clock.
			if !c.started {
				return
			}
			c.advance(tc.now, start, tc.now.Add(time.Hour))
			if !c.from.Equal(tc.from) {
				t.Errorf("a later request moved the clock to %s", c.from.Sub(start))
			}
		})
	}
}

// TestReflectorRequests: a watch is open until its body is closed, and the
// first request since mark is kept per resource.
func TestReflectorRequests(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.URL.Query().Get("watch") == "true" {
			<-release
		}
	}))
	defer srv.Close()
	defer close(release)

	reqs := newReflectorRequests()
	client := &http.Client{Transport: reqs.wrap(http.DefaultTransport)}
	before := time.Now()
	watch, err := client.Get(srv.URL + "/apis/example.com/v1/widgets?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	if open, first := reqs.state("widgets"); open != 1 || first.Before(before) {
		t.Fatalf("during the watch: open %d, first %v; want 1, after %v", open, first, before)
	}
	list, err := client.Get(srv.URL + "/api/v1/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, list.Body)
	_ = list.Body.Close()
	_ = list.Body.Close() // twice: counted once
	if open, _ := reqs.state("configmaps"); open != 0 {
		t.Errorf("after the list: %d configmaps requests open, want 0", open)
	}
	_ = watch.Body.Close()
	if open, _ := reqs.state("widgets"); open != 0 {
		t.Errorf("after the watch ended: %d open, want 0", open)
	}

	reqs.mark()
	if _, first := reqs.state("widgets"); !first.IsZero() {
		t.Errorf("after mark: first %v, want none", first)
	}
	again, err := client.Get(srv.URL + "/nowhere/widgets")
	if err != nil {
		t.Fatal(err)
	}
	_ = again.Body.Close()
	if _, first := reqs.state("widgets"); first.IsZero() {
		t.Error("a request after mark was not recorded")
	}
}
