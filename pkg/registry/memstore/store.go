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
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage"

	"github.com/google/uuid"
)

const (
	// The history keeps about as long as the watch cache does (75 s), and
	// never more than defaultHistoryBytes of superseded objects.
	defaultHistoryWindow     = 75 * time.Second
	defaultHistoryBytes      = 32 << 20
	defaultWatcherBuffer     = 100
	defaultWatcherBufferSize = 32 << 20
	defaultBookmarkInterval  = 10 * time.Second

	// tooLargeRetrySeconds is what the watch cache answers too: the client
	// retries soon, by when (for a same-epoch RV) the store may have caught up.
	tooLargeRetrySeconds = 1
	// unreadyRetrySeconds is the Retry-After of a store that cannot answer
	// yet (no state) or any more (stopped).
	unreadyRetrySeconds = 1
)

// Config configures a Store. NewFunc and NewListFunc are required.
type Config struct {
	// Resource names the resource in error messages and seeds object UIDs.
	Resource schema.GroupResource
	// NewFunc returns an empty single object; bookmarks carry one.
	NewFunc func() runtime.Object
	// NewListFunc returns an empty list (Items []T, set through meta.SetList).
	NewListFunc func() runtime.Object
	// AttrFunc returns labels and fields for selectors.
	// Default storage.DefaultClusterScopedAttr.
	AttrFunc storage.AttrFunc
	// Epoch is the high bits of every resourceVersion the store issues
	// (1..2^30-1). Default: drawn at random, which is what keeps another
	// replica's resourceVersions, and this process's next run's, apart
	// (410 Gone); tests set it.
	Epoch uint32
	// The history serves watch-from-RV replay and exact-RV lists. An event
	// leaves it when it is older than HistoryWindow (default 75 s), when
	// the objects it alone keeps alive (the versions it superseded) and
	// the later ones' exceed HistoryBytes (default 32 MiB), or when more
	// than HistorySize events are kept (default: no count limit). A watch
	// or exact list from before the oldest kept event gets 410.
	HistoryWindow time.Duration
	HistoryBytes  int64
	HistorySize   int
	// WatcherBuffer is the per-watcher queue length, counted in Replace
	// calls that changed something (one Replace is one queue entry however
	// many objects it changed); WatcherBufferBytes bounds the objects those
	// entries hold (a single entry is always accepted). A watcher over
	// either is ended at once: it resumes from the last resourceVersion it
	// received. Defaults 100 and 32 MiB. Queues share the events, so all
	// watchers together hold no more than the fullest one.
	WatcherBuffer      int
	WatcherBufferBytes int64
	// BookmarkInterval is the period of BOOKMARK events for watchers that
	// allow them. Default 10s.
	BookmarkInterval time.Duration

	// since measures event age for the history window; tests replace it.
	since func(time.Time) time.Duration
}

// Store is an in-memory, watchable, read-only-from-clients object store with
// Kubernetes list/watch semantics. See the package documentation.
type Store struct {
	resource     schema.GroupResource
	newFunc      func() runtime.Object
	newListFunc  func() runtime.Object
	attrFunc     storage.AttrFunc
	epoch        uint32
	historySize  int
	historyBytes int64
	historyAge   time.Duration
	bufferSize   int
	bufferBytes  int64
	bookmarkTick time.Duration
	now          func() time.Time // for creationTimestamp; tests replace it
	since        func(time.Time) time.Duration

	// replaceMu serialises Replace so the expensive diff runs without mu:
	// only Replace changes items, so the state it diffs against stays put.
	replaceMu sync.Mutex

	mu sync.RWMutex
	// items is sorted by name and never modified in place (copy on write),
	// so List and Watch take it under the read lock and use it afterwards.
	items []*entry
	// lastRV is the RV of this store's latest change (epoch<<32 at New).
	lastRV uint64
	// history holds the latest events in RV order; compactedRV is the RV of
	// the newest event dropped from it (0: none). A watch from X is
	// servable iff X >= compactedRV: every event after X is kept.
	history     []*event
	historyUsed int64 // Σ historyBytes of history
	compactedRV uint64
	watchers    map[uint64]*watcher
	nextWatcher uint64
	stopped     bool
	done        chan struct{}
}

var versioner = storage.APIObjectVersioner{}

// A resourceVersion is epoch<<32 | counter: the counter counts the
// store's changes, the epoch tells its RVs from another replica's (and
// from this process's earlier runs), which get 410 Gone, so client-go
// relists instead of reading them as a point of this store's history. Two
// stores drawing one epoch is a 1 in 2^30 chance; 30 bits keep every RV
// below 2^62, so it also fits an int64.
const (
	epochBits   = 30
	counterBits = 32
	epochMask   = 1<<epochBits - 1
)

func randomEpoch() uint32 {
	var b [4]byte
	for {
		// crypto/rand does not fail on supported platforms (since Go 1.24
		// it crashes the program itself).
		_, _ = rand.Read(b[:])
		if e := binary.BigEndian.Uint32(b[:]) & epochMask; e != 0 {
			return e
		}
	}
}

func epochOf(rv uint64) uint32 { return uint32(rv >> counterBits) }

// nextRVLocked is the resourceVersion of the store's next change; s.mu is
// held for writing.
func (s *Store) nextRVLocked() uint64 {
	if uint32(s.lastRV) == math.MaxUint32 {
		// 4.29e9 changes in one run: far beyond the expected rate (a few
		// per minute). Wrapping would break monotonicity; a restart draws
		// a new epoch and every client relists, so fail loudly.
		panic("memstore: resourceVersion counter exhausted; restart the process")
	}
	s.lastRV++
	return s.lastRV
}

// New returns a started Store. Call Stop to end its watchers and its
// bookmark timer.
func New(cfg Config) *Store {
	if cfg.NewFunc == nil || cfg.NewListFunc == nil {
		panic("memstore: Config.NewFunc and Config.NewListFunc are required")
	}
	s := &Store{
		resource:     cfg.Resource,
		newFunc:      cfg.NewFunc,
		newListFunc:  cfg.NewListFunc,
		attrFunc:     cfg.AttrFunc,
		epoch:        cfg.Epoch,
		historySize:  cfg.HistorySize,
		historyBytes: cfg.HistoryBytes,
		historyAge:   cfg.HistoryWindow,
		bufferSize:   cfg.WatcherBuffer,
		bufferBytes:  cfg.WatcherBufferBytes,
		bookmarkTick: cfg.BookmarkInterval,
		watchers:     map[uint64]*watcher{},
		done:         make(chan struct{}),
		now:          time.Now,
		since:        cfg.since,
	}
	if s.attrFunc == nil {
		s.attrFunc = storage.DefaultClusterScopedAttr
	}
	if s.epoch == 0 {
		s.epoch = randomEpoch()
	}
	if s.epoch > epochMask {
		panic(fmt.Sprintf("memstore: epoch %d outside 1..%d", s.epoch, epochMask))
	}
	if s.since == nil {
		s.since = time.Since
	}
	if s.historyBytes <= 0 {
		s.historyBytes = defaultHistoryBytes
	}
	if s.historyAge <= 0 {
		s.historyAge = defaultHistoryWindow
	}
	if s.bufferSize <= 0 {
		s.bufferSize = defaultWatcherBuffer
	}
	if s.bufferBytes <= 0 {
		s.bufferBytes = defaultWatcherBufferSize
	}
	registerMetrics()
	if s.bookmarkTick <= 0 {
		s.bookmarkTick = defaultBookmarkInterval
	}
	s.lastRV = uint64(s.epoch) << counterBits
	go s.bookmarkLoop()
	return s
}

// ResourceVersion returns the resourceVersion of this store's latest change
// (epoch<<32 if nothing changed yet). An unchanged Replace leaves it as it
// was.
func (s *Store) ResourceVersion() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastRV
}

// Stop ends all watchers and the bookmark timer. Later Watch calls fail;
// Get, List and Replace keep working.
func (s *Store) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	close(s.done)
	for id, w := range s.watchers {
		w.stopNow()
		delete(s.watchers, id)
	}
}

// uidNamespace is a fixed random UUID: the namespace of the name-based
// (version 5) UIDs below. Changing it changes every UID: replicas of two
// builds during a rollout would disagree.
var uidNamespace = uuid.UUID{0x6b, 0x1f, 0x3c, 0x52, 0x8e, 0x0d, 0x4a, 0x77, 0x9c, 0x43, 0x2e, 0x15, 0xd0, 0x8a, 0x61, 0xf4}

// UID returns the UID objects named name get in a store for resource: a
// version 5 UUID of "group/resource/name", so replicas computing
// independently agree on it (and a UID-based shard selector is stable).
func UID(resource schema.GroupResource, name string) types.UID {
	return types.UID(uuid.NewSHA1(uidNamespace, []byte(resource.Group+"/"+resource.Resource+"/"+name)).String())
}
