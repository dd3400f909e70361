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
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// entry is one stored object. Entries are immutable once published: Replace
// builds new ones, so readers take them without copying under the lock.
type entry struct {
	name   string
	obj    runtime.Object
	labels labels.Set
	fields fields.Set
	// size estimates the bytes the entry holds (objectSize + overhead).
	size int64
}

func newStoredEntry(name string, obj runtime.Object, l labels.Set, f fields.Set) *entry {
	return &entry{name: name, obj: obj, labels: l, fields: f, size: objectSize(obj) + entryOverhead + 2*int64(len(name))}
}

// entriesByName indexes a sorted entry list, to apply or undo events.
func entriesByName(items []*entry) map[string]*entry {
	byName := make(map[string]*entry, len(items))
	for _, e := range items {
		byName[e.name] = e
	}
	return byName
}

// sortedEntries is the store's items form of an index: sorted by name.
func sortedEntries(byName map[string]*entry) []*entry {
	out := make([]*entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	return out
}

// event is one change. For ADDED prev is nil, for DELETED cur is nil.
// Events are immutable and shared by history and all watchers.
type event struct {
	typ  watch.EventType
	rv   uint64
	cur  *entry
	prev *entry
	// at is when the event was made: the history keeps HistoryWindow.
	at time.Time
}

// historyBytes is what keeping ev in the history costs: the version it
// superseded (nothing else refers to it), and the event itself.
func (ev *event) historyBytes() int64 {
	if ev.prev == nil {
		return entryOverhead
	}
	return entryOverhead + ev.prev.size
}

// queueBytes is what a queued event holds alive at most: both versions.
func (ev *event) queueBytes() int64 {
	var n int64 = entryOverhead
	if ev.cur != nil {
		n += ev.cur.size
	}
	if ev.prev != nil {
		n += ev.prev.size
	}
	return n
}

func (s *Store) appendHistoryLocked(changes []*event) {
	s.history = append(s.history, changes...)
	for _, ev := range changes {
		s.historyUsed += ev.historyBytes()
	}
	s.trimHistoryLocked()
}

// trimHistoryLocked drops the oldest events beyond the window, the byte
// budget or the count. The newest event always stays: a watch from the
// current resourceVersion never needs it, and dropping it would gain
// nothing but a 410 for the RV just before it.
func (s *Store) trimHistoryLocked() {
	drop := 0
	used := s.historyUsed
	for drop < len(s.history)-1 {
		ev := s.history[drop]
		if used <= s.historyBytes && s.since(ev.at) <= s.historyAge &&
			(s.historySize <= 0 || len(s.history)-drop <= s.historySize) {
			break
		}
		used -= ev.historyBytes()
		drop++
	}
	if drop > 0 {
		s.compactedRV = s.history[drop-1].rv
		s.historyUsed = used
		// Clear the dropped slots so they do not pin old objects until the
		// next reallocation. Safe: replay copies the slice under the lock.
		clear(s.history[:drop])
		s.history = s.history[drop:]
	}
	historyBytesGauge.WithLabelValues(s.resource.String()).Set(float64(s.historyUsed))
	historyEventsGauge.WithLabelValues(s.resource.String()).Set(float64(len(s.history)))
}

// expireHistory drops events older than the window when no change came to
// push them out.
func (s *Store) expireHistory() {
	s.mu.RLock()
	stale := len(s.history) > 1 && s.since(s.history[0].at) > s.historyAge
	s.mu.RUnlock()
	if !stale {
		return
	}
	s.mu.Lock()
	s.trimHistoryLocked()
	s.mu.Unlock()
}
