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

// Package fieldselector holds a kind's selectable fields as one table, so
// that the field label conversion (pkg/apis/peerdiscovery/v1alpha1) and the
// registry's attribute functions are built from the same list. It lives
// outside the API packages because code-generator cannot walk generic types.
package fieldselector

import (
	"slices"

	"k8s.io/apimachinery/pkg/fields"
)

// Table is one kind's field selectors: each label and how to read it from
// the internal object. The field label conversion accepts exactly its labels
// and the registry builds each object's field set with Set, so the two
// cannot disagree.
type Table[T any] map[string]func(*T) string

// Labels are the selectable field labels, sorted.
func (f Table[T]) Labels() []string {
	out := make([]string, 0, len(f))
	for l := range f {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// Set is obj's field set, for the registry's attribute function.
func (f Table[T]) Set(obj *T) fields.Set {
	out := make(fields.Set, len(f))
	for l, get := range f {
		out[l] = get(obj)
	}
	return out
}
