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
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/sharding"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Get returns a copy of the named object. opts.ResourceVersion, if set, is
// read as "not older than" (like the watch cache): another epoch gives 410,
// a future one of this epoch the standard too-large error.
func (s *Store) Get(_ context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	var rv uint64
	if opts != nil {
		var err error
		if rv, err = s.parseRV(opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
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
	return e.obj.DeepCopyObject(), nil
}

func (s *Store) findLocked(name string) *entry {
	i, ok := slices.BinarySearchFunc(s.items, name, func(e *entry, n string) int { return strings.Compare(e.name, n) })
	if !ok {
		return nil
	}
	return s.items[i]
}

// List returns a copy of the matching objects, sorted by name, in a list
// whose resourceVersion is the store's latest change (or, for an Exact
// match, the requested one).
//
// Limit is ignored: the full result is returned in one page without a
// continue token (the sets are small and in memory; client-go pagers accept
// a complete first page). A continue token, which this store never issues,
// is answered with 410 so a pager falls back to a full list.
func (s *Store) List(_ context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
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
	s.mu.RLock()
	switch opts.ResourceVersionMatch {
	case "", metav1.ResourceVersionMatchNotOlderThan:
		err = s.checkNotOlderThanLocked(rv)
		// Items and lastRV change together under the write lock, so a
		// watch from listRV neither misses nor repeats an event.
		items, listRV = s.items, s.lastRV
	case metav1.ResourceVersionMatchExact:
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
	byName := entriesByName(s.items)
	for k := len(s.history) - 1; k >= 0 && s.history[k].rv > rv; k-- {
		ev := s.history[k]
		if ev.prev == nil {
			delete(byName, ev.cur.name)
		} else {
			byName[ev.prev.name] = ev.prev
		}
	}
	return sortedEntries(byName), nil
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
	if epochOf(rv) != s.epoch {
		return apierrors.NewResourceExpired(fmt.Sprintf(
			"resourceVersion %d was not issued by this server (epoch %d, this one's %d): another replica's, or an earlier run's",
			rv, epochOf(rv), s.epoch))
	}
	if rv > s.lastRV {
		return storage.NewTooLargeResourceVersionError(rv, s.lastRV, tooLargeRetrySeconds)
	}
	return nil
}

// checkNotOlderThanLocked: any owned RV up to now is satisfied by the
// current state; 0 means "any".
func (s *Store) checkNotOlderThanLocked(rv uint64) error {
	if rv == 0 {
		return nil
	}
	return s.checkOwnedLocked(rv)
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
