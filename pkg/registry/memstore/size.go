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
	"reflect"
	"sync"
	"time"
)

// Sizes bound the event history and the watch queues by bytes. They are
// estimates of the heap an object holds (strings, slices, maps, pointed-to
// structs), walked once per stored version: exact accounting would need an
// encoding per change, which is what the bounds exist to avoid.

// entryOverhead is what an entry and its event cost beyond the object:
// the structs, the attribute maps and the history slot.
const entryOverhead = 512

var timeType = reflect.TypeFor[time.Time]()

// objectSize estimates the bytes held by obj, including the value it points to.
func objectSize(obj any) int64 {
	v := reflect.ValueOf(obj)
	if !v.IsValid() {
		return 0
	}
	return int64(v.Type().Size()) + heapSize(v)
}

// pointerFree caches whether a type holds no pointers, so slices of
// scalars are sized without visiting their elements.
var pointerFree sync.Map // reflect.Type → bool

func hasPointers(t reflect.Type) bool {
	if v, ok := pointerFree.Load(t); ok {
		return !v.(bool)
	}
	var has bool
	switch t.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		has = true
	case reflect.Array:
		has = hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				has = true
				break
			}
		}
	}
	pointerFree.Store(t, !has)
	return has
}

// heapSize is the memory reachable from v outside v's own inline bytes.
// API objects are trees, so nothing is counted twice in practice.
func heapSize(v reflect.Value) int64 {
	t := v.Type()
	if t == timeType || !hasPointers(t) {
		// A time.Time's location is shared process-wide.
		return 0
	}
	switch v.Kind() {
	case reflect.String:
		return int64(v.Len())
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return int64(t.Elem().Size()) + heapSize(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			return 0
		}
		e := v.Elem()
		return int64(e.Type().Size()) + heapSize(e)
	case reflect.Slice:
		if v.IsNil() {
			return 0
		}
		n := int64(v.Cap()) * int64(t.Elem().Size())
		if hasPointers(t.Elem()) {
			for i := range v.Len() {
				n += heapSize(v.Index(i))
			}
		}
		return n
	case reflect.Array:
		var n int64
		for i := range v.Len() {
			n += heapSize(v.Index(i))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return 0
		}
		// Buckets hold keys and values with about 1/8 slack and a tophash byte.
		slot := int64(t.Key().Size()+t.Elem().Size()) + 1
		n := int64(v.Len()) * slot * 9 / 8
		for it := v.MapRange(); it.Next(); {
			n += heapSize(it.Key()) + heapSize(it.Value())
		}
		return n
	case reflect.Struct:
		var n int64
		for i := range v.NumField() {
			n += heapSize(v.Field(i))
		}
		return n
	}
	return 0
}
