package memstore

import (
	"context"
	"crypto/sha1"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/sharding"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
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
	// Clock is shared by all stores of a process. Default: a private clock.
	Clock *Clock
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
	// Decorate, when set, completes a private copy of an object each time
	// it is read (Get, List, watch events): for fields that are derived at
	// read time rather than stored. A watch event is decorated once, when
	// first delivered, and shared by all its watchers.
	Decorate func(runtime.Object)
	// BookmarkInterval is the period of BOOKMARK events for watchers that
	// allow them. Default 10s.
	BookmarkInterval time.Duration

	// since measures event age for the history window; tests replace it.
	since func(time.Time) time.Duration
}

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

// Store is an in-memory, watchable, read-only-from-clients object store with
// Kubernetes list/watch semantics. See the package documentation.
type Store struct {
	resource     schema.GroupResource
	newFunc      func() runtime.Object
	newListFunc  func() runtime.Object
	attrFunc     storage.AttrFunc
	clock        *Clock
	decorate     func(runtime.Object)
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
	// lastRV is the RV of this store's latest change (or the clock at New).
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
		clock:        cfg.Clock,
		decorate:     cfg.Decorate,
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
	if s.clock == nil {
		s.clock = NewClock()
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
	s.lastRV = s.clock.Current()
	s.clock.register(s)
	go s.bookmarkLoop()
	return s
}

// ResourceVersion returns the resourceVersion of this store's latest change
// (the clock's value at New if nothing changed since). An unchanged Replace
// leaves it as it was.
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
// (version 5) UIDs below.
var uidNamespace = [16]byte{0x6b, 0x1f, 0x3c, 0x52, 0x8e, 0x0d, 0x4a, 0x77, 0x9c, 0x43, 0x2e, 0x15, 0xd0, 0x8a, 0x61, 0xf4}

// UID returns the UID objects named name get in a store for resource: a
// version 5 UUID of "group/resource/name", so replicas computing
// independently agree on it (and a UID-based shard selector is stable).
func UID(resource schema.GroupResource, name string) types.UID {
	h := sha1.New()
	h.Write(uidNamespace[:])
	h.Write([]byte(resource.Group + "/" + resource.Resource + "/" + name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
}

// candidate is a caller's object copied and prepared outside the lock.
type candidate struct {
	name string
	obj  runtime.Object
	meta metav1.Object
}

// Replace makes objs the full content of the store, by name, and emits one
// event per difference: ADDED, MODIFIED, or DELETED (carrying a new RV).
// Objects semantically equal to the stored ones (ignoring resourceVersion,
// creationTimestamp, uid, generation, managedFields) cause no event and no
// RV bump. The store owns those metadata fields: uid is UID(resource, name),
// creationTimestamp is kept from first appearance, generation starts at 1
// and grows by one per change, managedFields are dropped (nobody writes
// these objects). objs are deep-copied; the caller keeps ownership.
// Objects without a name or without object metadata are skipped and
// reported; of duplicate names the last one wins.
//
// Replace never blocks on watchers.
func (s *Store) Replace(objs []runtime.Object) {
	cands := make([]candidate, 0, len(objs))
	for i, o := range objs {
		if o == nil {
			utilruntime.HandleError(fmt.Errorf("memstore %s: Replace: object %d is nil, skipped", s.resource, i))
			continue
		}
		// A shallow copy is enough to compare (the store-owned metadata is
		// set on it by assignment, never by mutating shared maps or
		// slices); only new and changed objects are deep-copied, which
		// keeps an unchanged Replace of thousands of objects cheap.
		c := shallowCopy(o)
		m, err := meta.Accessor(c)
		if err != nil {
			utilruntime.HandleError(fmt.Errorf("memstore %s: Replace: object %d: %w, skipped", s.resource, i, err))
			continue
		}
		if m.GetName() == "" {
			utilruntime.HandleError(fmt.Errorf("memstore %s: Replace: object %d has no name, skipped", s.resource, i))
			continue
		}
		cands = append(cands, candidate{name: m.GetName(), obj: c, meta: m})
	}
	// Stable sort then keep the last of each name: "last one wins".
	slices.SortStableFunc(cands, func(a, b candidate) int { return strings.Compare(a.name, b.name) })
	dedup := cands[:0]
	for i := range cands {
		if i+1 < len(cands) && cands[i+1].name == cands[i].name {
			utilruntime.HandleError(fmt.Errorf("memstore %s: Replace: duplicate name %q, last one wins", s.resource, cands[i].name))
			continue
		}
		dedup = append(dedup, cands[i])
	}
	cands = dedup

	s.replaceMu.Lock()
	defer s.replaceMu.Unlock()

	s.mu.RLock()
	old := s.items
	s.mu.RUnlock()

	// Diff by merging the two sorted slices. RVs are assigned later, under
	// the write lock; entries are not published before that.
	next := make([]*entry, 0, len(cands))
	var changes []*event
	i, j := 0, 0
	for i < len(old) || j < len(cands) {
		switch {
		case j == len(cands) || (i < len(old) && old[i].name < cands[j].name):
			changes = append(changes, &event{typ: watch.Deleted, prev: old[i]})
			i++
		case i == len(old) || cands[j].name < old[i].name:
			c := cands[j]
			c.meta.SetUID(UID(s.resource, c.name))
			c.meta.SetCreationTimestamp(metav1.NewTime(s.now()).Rfc3339Copy())
			c.meta.SetGeneration(1)
			c.meta.SetManagedFields(nil)
			c.meta.SetResourceVersion("")
			e, err := s.newEntry(c)
			if err != nil {
				utilruntime.HandleError(err)
				j++
				continue
			}
			next = append(next, e)
			changes = append(changes, &event{typ: watch.Added, cur: e})
			j++
		default:
			o, c := old[i], cands[j]
			om, _ := meta.Accessor(o.obj) // stored objects passed Accessor already
			c.meta.SetUID(om.GetUID())
			c.meta.SetCreationTimestamp(om.GetCreationTimestamp())
			c.meta.SetGeneration(om.GetGeneration())
			c.meta.SetManagedFields(nil)
			c.meta.SetResourceVersion(om.GetResourceVersion())
			if equal(o.obj, c.obj) {
				next = append(next, o)
			} else {
				c.meta.SetGeneration(om.GetGeneration() + 1)
				e, err := s.newEntry(c)
				if err != nil {
					utilruntime.HandleError(err)
					next = append(next, o)
				} else {
					next = append(next, e)
					changes = append(changes, &event{typ: watch.Modified, cur: e, prev: o})
				}
			}
			i++
			j++
		}
	}
	if len(changes) == 0 {
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leading {
		// The ViewStore publishes only while leading; a follower's content
		// comes from its leader alone (Restore, Apply).
		utilruntime.HandleError(fmt.Errorf("memstore %s: Replace on a following replica ignored", s.resource))
		return
	}
	now := time.Now()
	for _, ev := range changes {
		ev.rv, ev.at = c.nextLocked(), now
		if ev.cur != nil {
			// Not yet published: nobody else can see ev.cur.obj.
			if err := versioner.UpdateObject(ev.cur.obj, ev.rv); err != nil {
				utilruntime.HandleError(fmt.Errorf("memstore %s: setting resourceVersion: %w", s.resource, err))
			}
		}
	}
	s.items = next
	s.lastRV = changes[len(changes)-1].rv
	s.appendHistoryLocked(changes)
	c.feedLocked(s, changes)
	c.advanceLocked(s.lastRV)
	s.dispatchLocked(changes)
}

// newEntry deep-copies a candidate (which still shares memory with the
// caller's object) into a storable entry.
func (s *Store) newEntry(c candidate) (*entry, error) {
	obj := c.obj.DeepCopyObject()
	l, f, err := s.attrFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("memstore %s: Replace: attributes of %q: %w, skipped", s.resource, c.name, err)
	}
	return newStoredEntry(c.name, obj, l, f), nil
}

// shallowCopy copies the top-level struct of a *T object; other shapes
// (never seen for API types) are deep-copied.
func shallowCopy(o runtime.Object) runtime.Object {
	v := reflect.ValueOf(o)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return o.DeepCopyObject()
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(runtime.Object)
}

// equal is equality.Semantic.DeepEqual with reflect.DeepEqual as a fast
// path: identical values are semantically equal, and the semantic
// comparison (nil vs empty, Quantity, Time) is several times slower, so it
// runs only for the few objects that differ.
func equal(a, b runtime.Object) bool {
	return reflect.DeepEqual(a, b) || equality.Semantic.DeepEqual(a, b)
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

// Get returns a copy of the named object. opts.ResourceVersion, if set, is
// read as "not older than" (like the watch cache): another epoch gives 410,
// a future one of this epoch the standard too-large error.
func (s *Store) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	var rv uint64
	if opts != nil {
		var err error
		if rv, err = s.parseRV(opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
	s.clock.waitFresh(ctx, rv)
	s.mu.RLock()
	if err := s.checkNotOlderThanLocked(rv); err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	e := s.findLocked(name)
	s.mu.RUnlock()
	if e == nil {
		return nil, apierrors.NewNotFound(s.resource, name)
	}
	obj := e.obj.DeepCopyObject()
	if s.decorate != nil {
		s.decorate(obj)
	}
	return obj, nil
}

func (s *Store) findLocked(name string) *entry {
	i, ok := slices.BinarySearchFunc(s.items, name, func(e *entry, n string) int { return strings.Compare(e.name, n) })
	if !ok {
		return nil
	}
	return s.items[i]
}

// List returns a copy of the matching objects, sorted by name, in a list
// whose resourceVersion is the clock's current value (or, for an Exact
// match, the requested one).
//
// Limit is ignored: the full result is returned in one page without a
// continue token (the sets are small and in memory; client-go pagers accept
// a complete first page). A continue token, which this store never issues,
// is answered with 410 so a pager falls back to a full list.
func (s *Store) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	pred, err := s.predicate(opts)
	if err != nil {
		return nil, err
	}
	if opts.Continue != "" {
		return nil, apierrors.NewResourceExpired("continue tokens are not issued by this server; list again without continue")
	}
	rv, err := s.parseRV(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}

	var items []*entry
	var listRV uint64
	s.clock.waitFresh(ctx, rv)
	s.mu.RLock()
	switch opts.ResourceVersionMatch {
	case "", metav1.ResourceVersionMatchNotOlderThan:
		err = s.checkNotOlderThanLocked(rv)
		// All events of this store up to Current() are applied (they are
		// made under the write lock) and every later one gets a higher RV,
		// so a watch from listRV neither misses nor repeats an event.
		items, listRV = s.items, s.clock.Current()
	case metav1.ResourceVersionMatchExact:
		if err = s.checkHasStateLocked(); err != nil {
			break
		}
		items, err = s.itemsAtLocked(rv)
		listRV = rv
	default:
		err = apierrors.NewBadRequest(fmt.Sprintf("unknown resourceVersionMatch %q", opts.ResourceVersionMatch))
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}

	matched := make([]runtime.Object, 0, len(items))
	for _, e := range items {
		if matchEntry(&pred, e) {
			matched = append(matched, e.obj)
		}
	}
	// SetList copies the stored structs shallowly into a scratch list; one
	// DeepCopyObject of that list then copies everything in a few large
	// allocations instead of one object at a time.
	scratch := s.newListFunc()
	if err := meta.SetList(scratch, matched); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	list := scratch.DeepCopyObject()
	if s.decorate != nil {
		if err := meta.EachListItem(list, func(o runtime.Object) error { s.decorate(o); return nil }); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
	}
	if err := versioner.UpdateList(list, listRV, "", nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	pred.SetShardInfoOnList(list)
	return list, nil
}

// itemsAtLocked returns the state at exactly rv by undoing later events.
func (s *Store) itemsAtLocked(rv uint64) ([]*entry, error) {
	if rv == 0 {
		return nil, apierrors.NewBadRequest("resourceVersionMatch=Exact needs a non-zero resourceVersion")
	}
	if err := s.checkOwnedLocked(rv); err != nil {
		return nil, err
	}
	if rv >= s.lastRV {
		return s.items, nil
	}
	if rv < s.compactedRV {
		return nil, tooOld(rv, s.compactedRV)
	}
	byName := make(map[string]*entry, len(s.items))
	for _, e := range s.items {
		byName[e.name] = e
	}
	for k := len(s.history) - 1; k >= 0 && s.history[k].rv > rv; k-- {
		ev := s.history[k]
		if ev.prev == nil {
			delete(byName, ev.cur.name)
		} else {
			byName[ev.prev.name] = ev.prev
		}
	}
	out := make([]*entry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// parseRV parses a resourceVersion; "" and "0" give 0. Anything that is
// not a number cannot have come from this server, so it is answered with
// 410 like another epoch's (client-go then relists from scratch).
func (s *Store) parseRV(rv string) (uint64, error) {
	v, err := versioner.ParseResourceVersion(rv)
	if err != nil {
		return 0, apierrors.NewResourceExpired(fmt.Sprintf("resourceVersion %q was not issued by this server", rv))
	}
	return v, nil
}

// checkOwnedLocked rejects RVs of other epochs (410) and future RVs of this
// epoch (the standard "Too large resource version" 504). 0 is never passed.
func (s *Store) checkOwnedLocked(rv uint64) error {
	if !s.clock.owns(rv) {
		return apierrors.NewResourceExpired(fmt.Sprintf(
			"resourceVersion %d is not on this server's timeline (epoch %d, current %d): it was issued by a server whose latest changes this one never received",
			rv, epochOf(rv), s.clock.Epoch()))
	}
	if cur := s.clock.Current(); rv > cur {
		return storage.NewTooLargeResourceVersionError(rv, cur, tooLargeRetrySeconds)
	}
	return nil
}

// checkNotOlderThanLocked: any owned RV up to now is satisfied by the
// current state; 0 means "any".
func (s *Store) checkNotOlderThanLocked(rv uint64) error {
	if err := s.checkHasStateLocked(); err != nil {
		return err
	}
	if rv == 0 {
		return nil
	}
	return s.checkOwnedLocked(rv)
}

// checkHasStateLocked refuses reads on a standby replica that has neither
// led nor received its leader's snapshot: it has no state to answer from
// (and no resourceVersion to give it). Such a replica is not ready either.
func (s *Store) checkHasStateLocked() error {
	if s.clock.Current() == 0 {
		// 429 with Retry-After, as the watch cache answers while it
		// initializes: client-go retries a watch on 429 instead of relisting.
		return apierrors.NewTooManyRequests(fmt.Sprintf("%s: this replica has not received its leader's state yet", s.resource), unreadyRetrySeconds)
	}
	return nil
}

func tooOld(rv, compacted uint64) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, compacted))
}

func (s *Store) predicate(opts *metainternalversion.ListOptions) (storage.SelectionPredicate, error) {
	p := storage.SelectionPredicate{
		Label:    labels.Everything(),
		Field:    fields.Everything(),
		GetAttrs: s.attrFunc,
	}
	if opts == nil {
		return p, nil
	}
	if opts.LabelSelector != nil {
		p.Label = opts.LabelSelector
	}
	if opts.FieldSelector != nil {
		p.Field = opts.FieldSelector
	}
	p.AllowWatchBookmarks = opts.AllowWatchBookmarks
	// Mirrors the generic registry: an alpha shard selector (on UIDs, which
	// are deterministic here) is honoured only with its gate on.
	if opts.ShardSelector != "" && utilfeature.DefaultFeatureGate.Enabled(features.ShardedListAndWatch) {
		sel, err := sharding.Parse(opts.ShardSelector)
		if err != nil {
			return p, apierrors.NewBadRequest("invalid shard selector: " + err.Error())
		}
		p.ShardSelector = sel
	}
	return p, nil
}

func matchEntry(p *storage.SelectionPredicate, e *entry) bool {
	if p.ShardSelector != nil && !p.ShardSelector.Empty() {
		if ok, err := p.MatchesSharding(e.obj); err != nil || !ok {
			return false
		}
	}
	return p.MatchesObjectAttributes(e.labels, e.fields)
}
