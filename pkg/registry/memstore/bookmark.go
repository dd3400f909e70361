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
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

func (s *Store) bookmarkLoop() {
	t := time.NewTicker(s.bookmarkTick)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.sendBookmarks()
			s.expireHistory()
		}
	}
}

// sendBookmarks queues a BOOKMARK at the store's latest RV for watchers
// that allow them. Under the read lock no Replace of this store is in
// flight, so every event of this store up to that RV is already queued
// ahead of it. A full queue just skips the bookmark: bookmarks are
// optional and must not end a watch.
func (s *Store) sendBookmarks() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var batch *queued
	for _, w := range s.watchers {
		if !w.bookmarks {
			continue
		}
		if batch == nil {
			batch = s.newQueued([]*event{{typ: watch.Bookmark, rv: s.lastRV}})
			batch.bytes = 0
		}
		select {
		case w.in <- batch:
		default:
		}
	}
}

func (s *Store) bookmarkObject(ctx context.Context, rv uint64, initialEventsEnd bool) runtime.Object {
	obj := s.newFunc()
	if err := versioner.UpdateObject(obj, rv); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "memstore: bookmark", "resource", s.resource.String())
	}
	if initialEventsEnd {
		if err := storage.AnnotateInitialEventsEndBookmark(obj); err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "memstore: bookmark", "resource", s.resource.String())
		}
	}
	return obj
}
