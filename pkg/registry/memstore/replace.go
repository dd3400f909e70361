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
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

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
// RV bump. The store owns those fields: uid is UID(resource, name),
// creationTimestamp is kept from first appearance, generation starts at 1
// and grows by one per change, managedFields are dropped (nobody writes
// these objects). objs are deep-copied; the caller keeps ownership.
//
// Replace is all or nothing: a nil object, one without object metadata or
// a name, a name given twice, or attributes the AttrFunc cannot read fail
// the call with an error, and the store keeps its content.
//
// Replace never blocks on watchers.
func (s *Store) Replace(objs []runtime.Object) error {
	cands := make([]candidate, 0, len(objs))
	for i, o := range objs {
		if o == nil {
			return fmt.Errorf("memstore %s: Replace: object %d is nil", s.resource, i)
		}
		// A shallow copy is enough to compare (the store-owned metadata is
		// set on it by assignment, never by mutating shared maps or
		// slices); only new and changed objects are deep-copied, which
		// keeps an unchanged Replace of thousands of objects cheap.
		c := shallowCopy(o)
		m, err := meta.Accessor(c)
		if err != nil {
			return fmt.Errorf("memstore %s: Replace: object %d: %w", s.resource, i, err)
		}
		if m.GetName() == "" {
			return fmt.Errorf("memstore %s: Replace: object %d has no name", s.resource, i)
		}
		cands = append(cands, candidate{name: m.GetName(), obj: c, meta: m})
	}
	slices.SortFunc(cands, func(a, b candidate) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(cands); i++ {
		if cands[i].name == cands[i-1].name {
			return fmt.Errorf("memstore %s: Replace: name %q given twice", s.resource, cands[i].name)
		}
	}

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
				return err
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
					return err
				}
				next = append(next, e)
				changes = append(changes, &event{typ: watch.Modified, cur: e, prev: o})
			}
			i++
			j++
		}
	}
	if len(changes) == 0 {
		return nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now, first := time.Now(), s.lastRV
	for _, ev := range changes {
		ev.rv, ev.at = s.nextRVLocked(), now
		if ev.cur != nil {
			// Not yet published: nobody else can see ev.cur.obj.
			if err := versioner.UpdateObject(ev.cur.obj, ev.rv); err != nil {
				s.lastRV = first
				return fmt.Errorf("memstore %s: setting resourceVersion: %w", s.resource, err)
			}
		}
	}
	s.items = next
	s.appendHistoryLocked(changes)
	s.dispatchLocked(changes)
	return nil
}

// newEntry deep-copies a candidate (which still shares memory with the
// caller's object) into a storable entry.
func (s *Store) newEntry(c candidate) (*entry, error) {
	obj := c.obj.DeepCopyObject()
	l, f, err := s.attrFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("memstore %s: Replace: attributes of %q: %w", s.resource, c.name, err)
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
