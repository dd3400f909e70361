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

package routing

import (
	"time"
)

// RecoveryWindow is how long a server that stopped answering without
// shutting down is worth waiting for: a pause (a long GC, CPU starvation,
// SIGSTOP) ends within seconds, and a frozen server's Lease lapse starts
// the window again, so a freeze of up to its Lease duration plus the
// window is waited out. A crashed kube-apiserver takes longer than that to
// be restarted and ready again; waiting longer holds every caller (client-
// go retries a 503 with Retry-After up to ten times) for an answer that
// comes late or not at all: on the chaos soak (seed 7301, 30 min) a 10 s
// window saved failed operations (2,064 against upstream's 3,364) but the
// waits made the p99 time to success 1.66 s against upstream's 1.31 s and
// kept workers busy (8,816 operations skipped, over 1.2 x upstream's
// 6,893). So an Unavailable 503 names a short Retry-After while some
// server that serves the resource stopped less than RecoveryWindow ago
// without a goodbye, and none once they all stopped longer ago or shut
// down (an upgrade's roll: it is back when its replacement is ready, or
// never with this version). A server whose connection is refused is not
// waited for at all (Peer.Refused, and the proxy's refused attempts):
// nothing listens there, so it crashed or was killed, and on seed 2718
// (30 min) the waits for those were most of the workers' time spent on
// operations that failed all the same (docs/reports/chaos-soaks.md).
const RecoveryWindow = 5 * time.Second

// Recovering tells whether a server that is not ready now may be back
// within seconds: it did not shut down, and it stopped being ready less
// than RecoveryWindow before now. A zero since (not known) is not
// recovering.
func Recovering(shutDown bool, since, now time.Time) bool {
	return !shutDown && !since.IsZero() && now.Sub(since) < RecoveryWindow
}

// RecoveringNote ends the message of a 503 that names a wait because a
// server is Recovering.
var RecoveringNote = "one stopped less than " + RecoveryWindow.String() + " ago without shutting down and may be back within seconds"

// retryExpected tells whether an Unavailable decision's 503 names a short
// wait: some server other than self that the route lists is Recovering,
// and the view's read of it was not refused (Peer.Refused).
func (r Result) retryExpected(now time.Time) bool {
	for _, p := range r.Route.Peers {
		if p.ID != r.self && !p.Refused && Recovering(p.ShutDown, p.NotReadySince, now) {
			return true
		}
	}
	return false
}
