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

// Package replication keeps the replicas of peerdiscovery-apiserver
// identical: one replica, elected with a client-go Lease lock, computes and
// publishes; every other one copies the leader's stores over a stream
// (Handler on the leader, Follower on the others) and serves the same
// objects with the same resourceVersions. A watch resumed on any replica
// with a resourceVersion from any other continues without 410, and a
// follower that becomes leader continues the timeline (see
// memstore.Clock).
//
// The stream is one long-running GET of Path on the leader's own address,
// authenticated and authorized like any request (the follower's
// credentials; RBAC grants the non-resource URL), its TLS verified against
// the APIService's caBundle for the Service's DNS name, the same trust the
// aggregator uses. It carries newline-delimited JSON frames: one snapshot,
// then batches of changes in resourceVersion order, and a progress frame
// at least every ProgressInterval so a follower notices a silent leader.
package replication
