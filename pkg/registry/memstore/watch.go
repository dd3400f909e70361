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
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// Watch starts a watch. Errors about the requested resourceVersion are
// returned directly (not as an ERROR event), so the REST layer answers with
// that status and client-go relists:
//
//   - sendInitialEvents=true: ADDED for every matching object, then, with
//     allowWatchBookmarks, a BOOKMARK at the snapshot RV annotated
//     k8s.io/initial-events-end, then live events. A non-zero RV is read as
//     NotOlderThan (the current state always satisfies an RV of this epoch).
//   - RV "" or "0" without sendInitialEvents: ADDED for every matching
//     object, then live events (legacy behaviour, no bookmark).
//   - RV "" or "0" with sendInitialEvents=false: live events only.
//   - RV X: every event after X, then live events; 410 if X is older than
//     the kept history or from another epoch (or not a number), the
//     too-large error if X is in this epoch's future.
//
// Events are filtered like the watch cache does: an object that stops
// matching the selectors arrives as DELETED (its last matching content, at
// the event's RV), one that starts matching as ADDED. Event objects are
// runtime.CacheableObjects shared by every watcher of a live change (see
// Unwrap): each is converted and encoded once per content type. The watch
// ends when ctx is done, after opts.TimeoutSeconds, on Stop of the watch or
// of the store, or when the watcher falls more than WatcherBuffer changes
// or WatcherBufferBytes behind: then it is ended at once, dropping what it
// had queued, so the client watches again from its last RV while the
// writer and other watchers never wait.
func (s *Store) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	pred, err := s.predicate(opts)
	if err != nil {
		return nil, err
	}
	rv, err := s.parseRV(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	initial := opts.SendInitialEvents

	w := &watcher{
		s:         s,
		pred:      pred,
		bookmarks: pred.AllowWatchBookmarks,
		in:        make(chan *queued, s.bufferSize),
		result:    make(chan watch.Event),
		stopCh:    make(chan struct{}),
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		// 429, not 503: the client retries its watch (on another replica)
		// from its resourceVersion instead of relisting.
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("storage for %s is shutting down", s.resource), unreadyRetrySeconds)
	}
	switch {
	case initial != nil && *initial:
		if err := s.checkNotOlderThanLocked(rv); err != nil {
			return nil, err
		}
		w.snapshot = s.items
		if pred.AllowWatchBookmarks {
			w.endRV = s.lastRV
		}
	case rv == 0 && initial == nil:
		w.snapshot = s.items
	case rv == 0:
		// sendInitialEvents=false: start at the current state, no replay.
	default:
		if err := s.checkOwnedLocked(rv); err != nil {
			return nil, err
		}
		if rv < s.compactedRV {
			return nil, tooOld(rv, s.compactedRV)
		}
		k := sort.Search(len(s.history), func(i int) bool { return s.history[i].rv > rv })
		// A copy: appendHistoryLocked clears dropped slots in place.
		w.replay = slices.Clone(s.history[k:])
	}

	// Registered under the same lock that captured the snapshot or replay,
	// so the first live batch is exactly the next change: no gap, no repeat.
	s.nextWatcher++
	w.id = s.nextWatcher
	s.watchers[w.id] = w

	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		w.ctx, w.cancel = context.WithTimeout(ctx, time.Duration(*opts.TimeoutSeconds)*time.Second)
	} else {
		w.ctx, w.cancel = context.WithCancel(ctx)
	}
	go w.run()
	return w, nil
}

// delivery is one event as watchers receive it. A live change's deliveries
// are shared by all watchers of the store, so its objects are wrapped and
// encoded once however many watchers get them.
type delivery struct {
	s  *Store
	ev *event

	curOnce sync.Once
	cur     runtime.Object
	delOnce sync.Once
	del     runtime.Object
}

// current is the event's new object.
func (d *delivery) current(ctx context.Context) runtime.Object {
	d.curOnce.Do(func() { d.cur = d.s.readable(ctx, d.ev.cur.obj, 0) })
	return d.cur
}

// deleted is the last content before the event, at the event's RV.
func (d *delivery) deleted(ctx context.Context) runtime.Object {
	d.delOnce.Do(func() { d.del = d.s.readable(ctx, d.ev.prev.obj, d.ev.rv) })
	return d.del
}

// readable is a stored object as watchers get it: at rv when rv is not 0
// (a copy), wrapped so its encodings are cached. The wrapper hands
// encoders a copy anyway.
func (s *Store) readable(ctx context.Context, obj runtime.Object, rv uint64) runtime.Object {
	if rv != 0 {
		obj = obj.DeepCopyObject()
		if err := versioner.UpdateObject(obj, rv); err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "memstore: setting the resourceVersion of an event object", "resource", s.resource.String())
		}
	}
	return newCachedObject(obj)
}

// queued is one queue entry: a Replace's events, or a bookmark.
type queued struct {
	items []*delivery
	bytes int64
}

func (s *Store) newQueued(events []*event) *queued {
	q := &queued{items: make([]*delivery, len(events))}
	for i, ev := range events {
		q.items[i] = &delivery{s: s, ev: ev}
		q.bytes += ev.queueBytes()
	}
	return q
}

// dispatchLocked hands one Replace's events to every watcher without
// blocking. A watcher whose queue is full, in entries or in bytes, is
// ended at once.
func (s *Store) dispatchLocked(batch []*event) {
	if len(s.watchers) == 0 {
		return
	}
	q := s.newQueued(batch)
	for id, w := range s.watchers {
		if used := w.queuedBytes.Add(q.bytes); used > q.bytes && used > s.bufferBytes {
			w.queuedBytes.Add(-q.bytes)
			s.terminateLocked(id, w, "bytes", used)
			continue
		}
		select {
		case w.in <- q:
		default:
			w.queuedBytes.Add(-q.bytes)
			s.terminateLocked(id, w, "entries", int64(len(w.in)))
		}
	}
}

// terminateLocked ends a watcher that does not keep up: it drops what it
// queued (the client resumes from the last RV it received, from the
// history or by relisting) so it never holds memory the others freed.
func (s *Store) terminateLocked(id uint64, w *watcher, over string, used int64) {
	delete(s.watchers, id)
	w.stopNow()
	close(w.in)
	terminatedWatchers.WithLabelValues(s.resource.String()).Inc()
	// The watch request's logger: the line names the client's request.
	klog.FromContext(w.ctx).V(1).Info("memstore: ending a watcher that does not keep up", "resource", s.resource.String(), "watcher", id,
		"over", over, "queued", used, "limitEntries", s.bufferSize, "limitBytes", s.bufferBytes)
}

func (s *Store) forget(id uint64) {
	s.mu.Lock()
	delete(s.watchers, id)
	s.mu.Unlock()
}
