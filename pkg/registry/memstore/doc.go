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

// Package memstore is the in-memory storage of the peerdiscovery extension
// apiserver: a read-only-from-clients, watchable object store with real
// Kubernetes list/watch semantics, without etcd. The state is derived from
// live peers, so there is nothing to persist; the registry hands the full
// desired set to Replace whenever the engine recomputes, and REST handlers
// embed a *Store for get, list and watch.
//
// Each store issues its own resourceVersions, epoch<<32 | counter, the
// epoch drawn at random: replicas compute independently, and a
// resourceVersion of another replica (or of an earlier run) is answered
// with 410 Gone, so an informer that moved relists instead of reading it
// as a point of this store's history.
//
// Semantics decisions:
//
//   - Replace diffs by name and emits ADDED, MODIFIED, DELETED; objects
//     equal ignoring resourceVersion, creationTimestamp, uid, generation and
//     managedFields cause no event and no resourceVersion bump. The store
//     owns those fields: uid is derived from resource and name (UID), so
//     replicas agree and a deleted-then-recreated object gets the same uid;
//     creationTimestamp is kept from first appearance; generation starts at
//     1 and counts changes; managedFields are dropped. Bad input fails the
//     whole Replace with an error and changes nothing.
//   - Lists are sorted by name. Limit is ignored (all matching objects in one
//     page, no continue token); a continue token is answered with 410.
//   - List resourceVersion: "" and "0" serve the current state; NotOlderThan
//     (or legacy unset match) X of this epoch serves the current state; Exact
//     X serves the state at X, rebuilt from the event history (410 if older
//     than the history). A future X of this epoch gives the standard
//     "Too large resource version" error (504, cause
//     ResourceVersionTooLarge); another epoch or a non-number gives 410.
//     Get with a resourceVersion behaves like NotOlderThan.
//   - The list resourceVersion is the store's latest change, read under the
//     store lock: a watch from it replays exactly the later changes.
//   - Watch errors about resourceVersion are returned from Watch (the REST
//     layer answers with that status) rather than as an ERROR event.
//   - Memory is bounded by bytes and time: the history keeps HistoryWindow
//     (75 s) and at most HistoryBytes of superseded objects (estimated by
//     objectSize); a watcher is ended when its queue passes WatcherBuffer
//     Replace calls or WatcherBufferBytes (one Replace is always accepted,
//     so one large Replace does not end every watcher). Queued changes and
//     their encodings are shared by all watchers (cachedObject).
//   - Objects are stored as given: nothing is filled in at read time, so
//     two reads at one resourceVersion return the same object.
//   - An alpha shard selector is honoured when ShardedListAndWatch is on,
//     as the generic registry does.
package memstore
