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
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watchFrom starts a watch from rv and returns its error.
func watchFrom(s *Store, rv uint64) (watch.Interface, error) {
	return s.Watch(context.Background(), &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10)})
}

func exactList(s *Store, rv uint64) error {
	_, err := s.List(context.Background(), &metainternalversion.ListOptions{
		ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	return err
}

func TestHistoryKeepsItsWindowThenExpires(t *testing.T) {
	var age atomic.Int64 // what every event's age reads as
	s := newWidgetStore(t, func(c *Config) {
		c.HistoryWindow = time.Minute
		c.since = func(time.Time) time.Duration { return time.Duration(age.Load()) }
	})
	var rvs []uint64
	for i := range 5 {
		rvs = append(rvs, s.ResourceVersion())
		mustReplace(t, s, objs(wid("a", strconv.Itoa(i))))
	}
	// Within the window every change is replayable, and exact lists work.
	w, err := watchFrom(s, rvs[0])
	if err != nil {
		t.Fatalf("watch from the first RV within the window: %v", err)
	}
	w.Stop()
	if err := exactList(s, rvs[1]); err != nil {
		t.Fatalf("exact list within the window: %v", err)
	}

	// Past the window, with no change to push them out, the old events
	// go at the next expiry pass; the newest stays.
	age.Store(int64(2 * time.Minute))
	s.expireHistory()
	if _, err := watchFrom(s, rvs[0]); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from an expired RV: %v, want 410", err)
	}
	if err := exactList(s, rvs[1]); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("exact list of an expired RV: %v, want 410", err)
	}
	// The newest event is kept: the RV just before it still replays.
	w = startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(rvs[4], 10)})
	expectEvents(t, w, ev{watch.Modified, "a", "4"})
	// A client that relisted resumes exactly from the current RV.
	last := s.ResourceVersion()
	w = startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(last, 10)})
	mustReplace(t, s, objs(wid("a", "after")))
	expectEvents(t, w, ev{watch.Modified, "a", "after"})
}

func TestHistoryIsBoundedByBytes(t *testing.T) {
	const budget = 1 << 20
	s := newWidgetStore(t, func(c *Config) { c.HistoryBytes = budget })
	big := func(color string) runtime.Object {
		w := wid("a", color)
		w.Spec.Tags = []string{strings.Repeat("x", 100<<10)}
		return w
	}
	var rvs []uint64
	for i := range 40 {
		rvs = append(rvs, s.ResourceVersion())
		mustReplace(t, s, []runtime.Object{big(strconv.Itoa(i))})
	}
	s.mu.RLock()
	used, kept := s.historyUsed, len(s.history)
	s.mu.RUnlock()
	if used > budget {
		t.Fatalf("history holds %d bytes, budget %d", used, budget)
	}
	// 100 KiB per superseded version: about 10 fit, not 40.
	if kept < 5 || kept > 11 {
		t.Fatalf("history keeps %d events of 100 KiB under a 1 MiB budget", kept)
	}
	if _, err := watchFrom(s, rvs[0]); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from a compacted RV: %v, want 410", err)
	}
	// The recent ones replay exactly.
	from := rvs[len(rvs)-3]
	w := startWatch(t, s, &metainternalversion.ListOptions{ResourceVersion: strconv.FormatUint(from, 10)})
	expectEvents(t, w, ev{watch.Modified, "a", "37"}, ev{watch.Modified, "a", "38"}, ev{watch.Modified, "a", "39"})
}

func TestObjectSizeEstimate(t *testing.T) {
	w := wid("a", "red")
	small := objectSize(w)
	w.Spec.Tags = append(w.Spec.Tags, strings.Repeat("y", 10000))
	if got := objectSize(w) - small; got < 10000 || got > 10100 {
		t.Fatalf("a 10,000-byte string added %d bytes to the estimate", got)
	}
	if objectSize(nil) != 0 {
		t.Fatal("nil has a size")
	}
}
