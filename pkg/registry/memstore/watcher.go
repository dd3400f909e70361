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
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

type watcher struct {
	s         *Store
	id        uint64
	pred      storage.SelectionPredicate
	bookmarks bool

	// in is written only under s.mu (dispatch under the write lock,
	// bookmarks under the read lock) and closed only under the write lock
	// when the watcher leaves the store's set. queuedBytes is the
	// estimated size of what in holds.
	in          chan *queued
	queuedBytes atomic.Int64
	result      chan watch.Event

	stopCh   chan struct{}
	stopOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc

	// What to send before the live queue; set before run starts.
	snapshot []*entry
	replay   []*event
	endRV    uint64 // non-zero: initial-events-end bookmark at this RV
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

func (w *watcher) Stop() { w.stopNow() }

func (w *watcher) stopNow() { w.stopOnce.Do(func() { close(w.stopCh) }) }

// drain drops what is still queued, once the watcher left the store's set
// (nothing is sent to it any more): a watch value its consumer keeps must
// not keep the events alive.
func (w *watcher) drain() {
	for {
		select {
		case _, ok := <-w.in:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func (w *watcher) run() {
	defer close(w.result)
	defer w.cancel()
	defer w.drain()
	defer w.s.forget(w.id)

	for _, e := range w.snapshot {
		if matchEntry(&w.pred, e) {
			if !w.send(watch.Event{Type: watch.Added, Object: w.s.readable(w.ctx, e.obj, 0)}) {
				return
			}
		}
	}
	w.snapshot = nil
	for _, ev := range w.replay {
		if !w.deliver(&delivery{s: w.s, ev: ev}) {
			return
		}
	}
	w.replay = nil
	if w.endRV != 0 {
		if !w.send(watch.Event{Type: watch.Bookmark, Object: w.s.bookmarkObject(w.ctx, w.endRV, true)}) {
			return
		}
	}
	for {
		select {
		case q, ok := <-w.in:
			if !ok {
				return // ended; what was queued before was delivered
			}
			w.queuedBytes.Add(-q.bytes)
			for _, d := range q.items {
				if !w.deliver(d) {
					return
				}
			}
		case <-w.ctx.Done():
			return
		case <-w.stopCh:
			return
		}
	}
}

// deliver converts a stored event for this watcher's selectors.
func (w *watcher) deliver(d *delivery) bool {
	ev := d.ev
	if ev.typ == watch.Bookmark {
		if !w.bookmarks {
			return true
		}
		return w.send(watch.Event{Type: watch.Bookmark, Object: w.s.bookmarkObject(w.ctx, ev.rv, false)})
	}
	cur := ev.cur != nil && matchEntry(&w.pred, ev.cur)
	prev := ev.prev != nil && matchEntry(&w.pred, ev.prev)
	switch {
	case cur && prev:
		return w.send(watch.Event{Type: watch.Modified, Object: d.current(w.ctx)})
	case cur:
		return w.send(watch.Event{Type: watch.Added, Object: d.current(w.ctx)})
	case prev:
		// Deleted, or no longer matching: the last content the watcher was
		// entitled to see, at the event's RV (as the watch cache does).
		return w.send(watch.Event{Type: watch.Deleted, Object: d.deleted(w.ctx)})
	}
	return true
}

// send blocks until the consumer takes e or the watch ends; a stopped watch
// never delivers another event even if the consumer is still reading.
func (w *watcher) send(e watch.Event) bool {
	select {
	case <-w.stopCh:
		return false
	case <-w.ctx.Done():
		return false
	default:
	}
	select {
	case w.result <- e:
		return true
	case <-w.stopCh:
		return false
	case <-w.ctx.Done():
		return false
	}
}
