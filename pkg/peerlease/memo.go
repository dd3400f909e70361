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

package peerlease

import (
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServedMemo parses registration Leases for a reader that reads each one
// again on every renewal (every DefaultRenewInterval), which rewrites the
// Lease but rarely its served-resources record: the record, thousands of
// resources at scale, is decoded only when it changed. The lists it returns
// are shared between calls: read them, do not modify them. Safe for
// concurrent use.
type ServedMemo struct {
	mu      sync.Mutex
	byLease map[types.NamespacedName]memoEntry
}

type memoEntry struct {
	raw    string
	served []ServedResource
}

// ParseRegistration is ParseRegistration, with the served list decoded
// only when the Lease's record differs from the one last parsed for it.
func (m *ServedMemo) ParseRegistration(l *coordinationv1.Lease) (Registration, error) {
	key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
	raw, recorded := l.Annotations[ServedResourcesAnnotation]
	m.mu.Lock()
	e, seen := m.byLease[key]
	m.mu.Unlock()
	if !recorded || !seen || e.raw != raw {
		reg, err := ParseRegistration(l)
		if err == nil && recorded {
			m.remember(key, memoEntry{raw: raw, served: reg.Served})
		}
		return reg, err
	}
	// The record decoded before: everything else is read as usual.
	reg, err := ParseRegistrationSkippingServed(l)
	if err != nil {
		return Registration{}, err
	}
	reg.Served = e.served
	return reg, nil
}

// ParseServedRecord is ParseServedRecord, with the list decoded only when
// the record differs from the one last parsed for that Lease (a reader
// that goes over every Lease on each turn).
func (m *ServedMemo) ParseServedRecord(l *coordinationv1.Lease) (ServedRecord, error) {
	id, raw, etags, err := servedRecordIdentity(l)
	if err != nil {
		return ServedRecord{}, err
	}
	key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
	m.mu.Lock()
	e, seen := m.byLease[key]
	m.mu.Unlock()
	if seen && e.raw == raw {
		return ServedRecord{ServerID: id, Served: e.served, ETags: etags}, nil
	}
	rec, err := ParseServedRecord(l)
	if err == nil {
		m.remember(key, memoEntry{raw: raw, served: rec.Served})
	}
	return rec, err
}

func (m *ServedMemo) remember(key types.NamespacedName, e memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byLease == nil {
		m.byLease = map[types.NamespacedName]memoEntry{}
	}
	m.byLease[key] = e
}

// Forget drops what the memo holds for a Lease (it was deleted).
func (m *ServedMemo) Forget(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byLease, types.NamespacedName{Namespace: namespace, Name: name})
}

// Retain drops what the memo holds for every Lease keep does not name: for
// a reader that goes over all Leases at once, the ones it did not see.
func (m *ServedMemo) Retain(keep func(namespace, name string) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.byLease {
		if !keep(k.Namespace, k.Name) {
			delete(m.byLease, k)
		}
	}
}
