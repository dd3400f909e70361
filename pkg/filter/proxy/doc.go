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

// Package proxy sends a request to a peer kube-apiserver. proxy.go: the
// candidates tried in order (each checked against the filter's current
// routing snapshot just before its attempt, unless it is the first and
// the snapshot is still the decision's), failover where it is safe,
// what a failure answers, the identity headers; transport.go: the
// connection pools (peer CA, front-proxy client certificate, egress
// selector, HTTP/2 health check) and whether an attempt reached the peer;
// response.go: what is done to a peer's answer (read-ahead, redirects, a
// stream's clean end); writer.go: what the client was sent, what was read
// of its body, and the buffers the answer is copied through; inflight.go:
// ending the attempts to a peer that stopped answering; unreachable.go:
// failing at once the dials to an endpoint whose last dial timed out,
// until a probe connects.
//
// The files follow one attempt: each is entered at most twice by it (the
// reverse proxy's callbacks are grouped so, and what to do with the
// answer is decided once, in Serve), which keeps a request easy to
// follow; hack/request-walk.sh traces one and counts.
package proxy
