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

// Package discoverychanges tells when a kube-apiserver's own aggregated
// discovery (/apis) changed, as it changes, by wrapping the server's
// discovery manager (aggregated.ResourceManager): every built-in group,
// CRD and aggregated APIService reaches /apis through it.
//
// The manager's invalidation callback alone would not do: kube-aggregator
// sets every aggregated APIService's priority again each time it refreshes
// that APIService's discovery (each minute, each APIService), and that
// invalidates the cache even when nothing changed, so the callback fires
// about once a minute per aggregated APIService. A read of /apis after each
// would rebuild the whole document each time. The wrapper tells those
// apart: a group-version added or changed (the manager invalidates only
// then), removed, groups replaced, or a priority that differs from the one
// last set.
package discoverychanges

import (
	"sync"
	"sync/atomic"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

// Wrap returns rm, which tells changed after each change of what it
// serves. changed must not block (it runs on the caller of the manager).
// Every user of the manager must be given the wrapper: the changes of a
// caller that bypasses it are told too, but one that lands while a
// wrapped call sets an unchanged priority can be missed.
//
// The second result is false when rm cannot tell its changes (a release
// whose manager has no invalidation callback); rm is then returned as it
// is.
func Wrap(rm aggregated.ResourceManager, changed func()) (aggregated.ResourceManager, bool) {
	inner, ok := rm.(invalidating)
	if !ok {
		return rm, false
	}
	s := &state{changed: changed, priorities: map[priorityKey]priority{}}
	inner.AddInvalidationCallback(s.invalidated)
	// NewResourceManager's manager is the built-in source's.
	return &manager{ResourceManager: rm, state: s, source: aggregated.BuiltinSource}, true
}

// invalidating is a manager with an invalidation callback (k8s.io/apiserver
// v0.36 and later; asserted, so the filter builds against older ones).
type invalidating interface {
	AddInvalidationCallback(func())
}

// state is shared by a manager and the managers WithSource makes of it.
type state struct {
	changed func()
	// mu serializes the wrapped calls, so an invalidation during one is
	// that call's.
	mu sync.Mutex
	// inCall and fired are set under mu; the callback reads inCall and
	// sets fired under the manager's own lock.
	inCall, fired atomic.Bool
	// priorities are the priorities last set, per source and
	// group-version: a few bytes per group-version.
	priorities map[priorityKey]priority
	// chained is a callback a user of the wrapper asked for.
	chained atomic.Pointer[func()]
}

type priorityKey struct {
	source aggregated.Source
	gv     metav1.GroupVersion
}

type priority struct{ group, version int }

// invalidated is the inner manager's invalidation callback, which it calls
// under its lock.
func (s *state) invalidated() {
	if s.inCall.Load() {
		s.fired.Store(true)
	} else {
		// Not a wrapped call's: a change, as far as can be told.
		s.changed()
	}
	if cb := s.chained.Load(); cb != nil {
		(*cb)()
	}
}

// call runs f as a wrapped call and tells whether the manager invalidated
// its cache during it. mu is held.
func (s *state) call(f func()) bool {
	s.fired.Store(false)
	s.inCall.Store(true)
	f()
	s.inCall.Store(false)
	return s.fired.Load()
}

// manager is the wrapper; source is its manager's (WithSource's).
type manager struct {
	aggregated.ResourceManager
	*state
	source aggregated.Source
}

func (m *manager) AddGroupVersion(groupName string, value apidiscoveryv2.APIVersionDiscovery) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// The manager invalidates only when the version is new or differs.
	if m.call(func() { m.ResourceManager.AddGroupVersion(groupName, value) }) {
		m.changed()
	}
}

func (m *manager) SetGroupVersionPriority(gv metav1.GroupVersion, groupPriority, versionPriority int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, p := priorityKey{source: m.source, gv: gv}, priority{group: groupPriority, version: versionPriority}
	last, known := m.priorities[key]
	m.priorities[key] = p
	// The manager invalidates on every call, also when the priority is
	// the one it had.
	if m.call(func() { m.ResourceManager.SetGroupVersionPriority(gv, groupPriority, versionPriority) }) && (!known || last != p) {
		m.changed()
	}
}

func (m *manager) RemoveGroup(groupName string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key := range m.priorities {
		if key.source == m.source && key.gv.Group == groupName {
			delete(m.priorities, key)
		}
	}
	m.call(func() { m.ResourceManager.RemoveGroup(groupName) })
	// RemoveGroup clears the cache without the callback.
	m.changed()
}

func (m *manager) RemoveGroupVersion(gv metav1.GroupVersion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.call(func() { m.ResourceManager.RemoveGroupVersion(gv) }) {
		delete(m.priorities, priorityKey{source: m.source, gv: gv})
		m.changed()
	}
}

func (m *manager) SetGroups(groups []apidiscoveryv2.APIGroupDiscovery) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// The manager drops the priorities of what groups does not list.
	for key := range m.priorities {
		if key.source == m.source {
			delete(m.priorities, key)
		}
	}
	m.call(func() { m.ResourceManager.SetGroups(groups) })
	m.changed()
}

func (m *manager) WithSource(source aggregated.Source) aggregated.ResourceManager {
	return &manager{ResourceManager: m.ResourceManager.WithSource(source), state: m.state, source: source}
}

// AddInvalidationCallback keeps the manager's callback for the wrapper and
// calls callback after it (the manager holds one callback).
func (m *manager) AddInvalidationCallback(callback func()) {
	m.chained.Store(&callback)
}
