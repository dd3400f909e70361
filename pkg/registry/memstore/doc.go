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
// live peers, so there is nothing to persist; the compute layer hands the
// full desired set to Replace whenever it recomputes, and REST handlers
// embed a *Store for get, list and watch.
//
// resourceVersions come from a Clock shared by all stores of the process:
// epoch<<32 | counter. A following replica copies its leader's stores with
// the same resourceVersions (Clock.Restore, Clock.Apply); a
// resourceVersion from another timeline is answered with 410 Gone, so an
// informer whose history was lost relists.
//
// Semantics decisions:
//
//   - Replace diffs by name and emits ADDED, MODIFIED, DELETED; objects
//     equal ignoring resourceVersion, creationTimestamp, uid, generation and
//     managedFields cause no event and no resourceVersion bump. The store
//     owns those fields: uid is derived from resource and name (UID), so
//     replicas agree and a deleted-then-recreated object gets the same uid;
//     creationTimestamp is kept from first appearance; generation starts at
//     1 and counts changes; managedFields are dropped.
//   - Lists are sorted by name. Limit is ignored (all matching objects in one
//     page, no continue token); a continue token is answered with 410.
//   - List resourceVersion: "" and "0" serve the current state; NotOlderThan
//     (or legacy unset match) X of this epoch serves the current state; Exact
//     X serves the state at X, rebuilt from the event history (410 if older
//     than the history). A future X of this epoch gives the standard
//     "Too large resource version" timeout (504, cause
//     ResourceVersionTooLarge); another epoch or a non-number gives 410.
//     Get with a resourceVersion behaves like NotOlderThan.
//   - The list resourceVersion is the clock's current value, read under the
//     store lock: a watch from it replays exactly the later changes.
//   - Watch errors about resourceVersion are returned from Watch (the REST
//     layer answers with that status) rather than as an ERROR event.
//   - Memory is bounded by bytes and time: the history keeps HistoryWindow
//     (75 s) and at most HistoryBytes of superseded objects (estimated by
//     objectSize); a watcher is ended when its queue passes WatcherBuffer
//     Replace calls or WatcherBufferBytes (one Replace is always accepted,
//     so one large Replace does not end every watcher). Queued changes and
//     their encodings are shared by all watchers (cachedObject).
//   - Config.Decorate fills fields derived at read time (on a copy): the
//     ViewStore completes routing tables' readiness this way.
//   - An alpha shard selector is honoured when ShardedListAndWatch is on,
//     as the generic registry does.
package memstore
