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
	"k8s.io/apiserver/pkg/storage"
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
// the event's RV), one that starts matching as ADDED. Each watcher gets
// its own copies. The watch ends when ctx is done, after opts.TimeoutSeconds,
// on Stop of the watch or of the store, or when the watcher falls
// WatcherBuffer changes behind: then the changes already queued are
// delivered and the result channel is closed, so the client watches again
// from its last RV while the writer and other watchers never wait.
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
	s.clock.waitFresh(ctx, rv)

	w := &watcher{
		s:         s,
		pred:      pred,
		bookmarks: pred.AllowWatchBookmarks,
		in:        make(chan []*event, s.bufferSize),
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
	if err := s.checkHasStateLocked(); err != nil {
		return nil, err
	}
	switch {
	case initial != nil && *initial:
		if err := s.checkNotOlderThanLocked(rv); err != nil {
			return nil, err
		}
		w.snapshot = s.items
		if pred.AllowWatchBookmarks {
			w.endRV = s.clock.Current()
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

// dispatchLocked hands one Replace's events to every watcher without
// blocking. A watcher with a full queue is ended: closing its queue lets it
// deliver what it already has, then close its result channel.
func (s *Store) dispatchLocked(batch []*event) {
	for id, w := range s.watchers {
		select {
		case w.in <- batch:
		default:
			close(w.in)
			delete(s.watchers, id)
			klog.V(1).InfoS("memstore: ending slow watcher", "resource", s.resource.String(), "watcher", id, "buffer", s.bufferSize)
		}
	}
}

func (s *Store) forget(id uint64) {
	s.mu.Lock()
	delete(s.watchers, id)
	s.mu.Unlock()
}

func (s *Store) bookmarkLoop() {
	t := time.NewTicker(s.bookmarkTick)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.sendBookmarks()
		}
	}
}

// sendBookmarks queues a BOOKMARK at the clock's current RV for watchers
// that allow them. Under the read lock no Replace of this store is in
// flight, so every event of this store up to that RV is already queued
// ahead of it. A full queue just skips the bookmark: bookmarks are
// optional and must not end a watch.
func (s *Store) sendBookmarks() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var batch []*event
	for _, w := range s.watchers {
		if !w.bookmarks {
			continue
		}
		if batch == nil {
			batch = []*event{{typ: watch.Bookmark, rv: s.clock.Current()}}
		}
		select {
		case w.in <- batch:
		default:
		}
	}
}

func (s *Store) bookmarkObject(rv uint64, initialEventsEnd bool) runtime.Object {
	obj := s.newFunc()
	if err := versioner.UpdateObject(obj, rv); err != nil {
		utilruntime.HandleError(fmt.Errorf("memstore %s: bookmark: %w", s.resource, err))
	}
	if initialEventsEnd {
		if err := storage.AnnotateInitialEventsEndBookmark(obj); err != nil {
			utilruntime.HandleError(fmt.Errorf("memstore %s: bookmark: %w", s.resource, err))
		}
	}
	return obj
}

type watcher struct {
	s         *Store
	id        uint64
	pred      storage.SelectionPredicate
	bookmarks bool

	// in is written only under s.mu (dispatch under the write lock,
	// bookmarks under the read lock) and closed only by dispatchLocked.
	in     chan []*event
	result chan watch.Event

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

func (w *watcher) run() {
	defer close(w.result)
	defer w.cancel()
	defer w.s.forget(w.id)

	for _, e := range w.snapshot {
		if matchEntry(&w.pred, e) {
			if !w.send(watch.Event{Type: watch.Added, Object: e.obj.DeepCopyObject()}) {
				return
			}
		}
	}
	w.snapshot = nil
	for _, ev := range w.replay {
		if !w.deliver(ev) {
			return
		}
	}
	w.replay = nil
	if w.endRV != 0 {
		if !w.send(watch.Event{Type: watch.Bookmark, Object: w.s.bookmarkObject(w.endRV, true)}) {
			return
		}
	}
	for {
		select {
		case batch, ok := <-w.in:
			if !ok {
				return // ended as too slow; everything queued was delivered
			}
			for _, ev := range batch {
				if !w.deliver(ev) {
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
func (w *watcher) deliver(ev *event) bool {
	if ev.typ == watch.Bookmark {
		if !w.bookmarks {
			return true
		}
		return w.send(watch.Event{Type: watch.Bookmark, Object: w.s.bookmarkObject(ev.rv, false)})
	}
	cur := ev.cur != nil && matchEntry(&w.pred, ev.cur)
	prev := ev.prev != nil && matchEntry(&w.pred, ev.prev)
	switch {
	case cur && prev:
		return w.send(watch.Event{Type: watch.Modified, Object: ev.cur.obj.DeepCopyObject()})
	case cur:
		return w.send(watch.Event{Type: watch.Added, Object: ev.cur.obj.DeepCopyObject()})
	case prev:
		// Deleted, or no longer matching: the last content the watcher was
		// entitled to see, at the event's RV (as the watch cache does).
		obj := ev.prev.obj.DeepCopyObject()
		if err := versioner.UpdateObject(obj, ev.rv); err != nil {
			utilruntime.HandleError(fmt.Errorf("memstore %s: %w", w.s.resource, err))
		}
		return w.send(watch.Event{Type: watch.Deleted, Object: obj})
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
