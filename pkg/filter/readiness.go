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

package filter

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"

	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// unsyncedReadyAfter is how long after start an unsynced filter (no
// peerdiscovery-apiserver reachable: not installed yet, or down) holds back
// readiness: then the server serves as stock kube-apiserver does.
const unsyncedReadyAfter = 5 * time.Second

// routableSettle is how long this server must have seen itself routable
// before it reports ready: the other servers' filters read the same
// routing tables over watches of their own, which may lag this one's by
// more than a moment on a busy machine.
const routableSettle = 2 * time.Second

// ReadyzCheck holds this kube-apiserver's readiness at start until its
// peers can route to it: until peerdiscovery lists it ready with the
// discovery it serves now (the same ETag), whose routes were published
// before it. Otherwise a load balancer sends clients to a new server that
// serves, say, a v1.37-only API, while the other servers' filters do not
// know yet and answer 404 for it. The hold is bounded (SyncGracePeriod after
// the post-start hook, or unsyncedReadyAfter while nothing syncs), and once
// passed it never fails again: discovery changing later (a CRD) must not
// take a running server out of rotation.
func (f *Filter) ReadyzCheck() healthz.HealthChecker {
	return healthz.NamedCheck("peerdiscovery-filter", func(*http.Request) error {
		if f.routableLatched.Load() {
			return nil
		}
		now := f.clock.Now()
		routable, err := f.routableByPeers(now)
		if err != nil {
			f.routableSince.Store(nil)
			return err
		}
		if !routable { // nothing to wait for (disabled, bounded, no peerdiscovery)
			f.routableLatched.Store(true)
			return nil
		}
		since := f.routableSince.Load()
		if since == nil {
			since = &now
			f.routableSince.Store(since)
		}
		if wait := routableSettle - now.Sub(*since); wait > 0 && !f.pastReadinessBound(now) {
			return fmt.Errorf("peers route to this server; letting their watches catch up for %s", wait.Round(100*time.Millisecond))
		}
		f.routableLatched.Store(true)
		return nil
	})
}

// pastReadinessBound: SyncGracePeriod since the post-start hook has passed.
func (f *Filter) pastReadinessBound(now time.Time) bool {
	deadline := f.views.SyncDeadline()
	return deadline != nil && !now.Before(*deadline)
}

// routableByPeers is true when peerdiscovery lists this server ready with
// its current discovery; false without an error when readiness need not
// wait for that (the filter is off, the bound passed, nothing syncs).
func (f *Filter) routableByPeers(now time.Time) (bool, error) {
	deadline := f.views.SyncDeadline()
	switch {
	case !f.opts.Enabled():
		return false, nil
	case deadline == nil:
		return false, fmt.Errorf("the peerdiscovery filter has not started yet")
	case f.pastReadinessBound(now):
		return false, nil // bounded: serve as stock kube-apiserver would
	case !f.views.Routes.Synced() || !f.views.Local.Synced():
		started := deadline.Add(-f.opts.SyncGracePeriod)
		if now.Sub(started) >= unsyncedReadyAfter {
			return false, nil
		}
		return false, fmt.Errorf("the peerdiscovery filter's routing caches are not synced yet")
	}
	local := f.views.Local.Current().APIsETag
	if p, ok := f.views.Routes.PeerObject(f.serverID); ok {
		if rp := routing.PeerFromObject(p); !rp.Ready {
			return false, fmt.Errorf("peers cannot route to this server yet: its APIServerPeer %s is not ready", p.Name)
		}
		if p.Status.DiscoveryETag != local {
			return false, fmt.Errorf("peers cannot route to this server yet: peerdiscovery has its discovery %s, it serves %s", p.Status.DiscoveryETag, local)
		}
		return true, nil
	}
	return false, fmt.Errorf("peers cannot route to this server yet: peerdiscovery lists no APIServerPeer %s", f.serverID)
}
