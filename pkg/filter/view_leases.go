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
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// leaseRecords knows what every server's registration Lease records it
// serves, from this kube-apiserver's own watch of the Leases (its watch
// cache, fed by etcd). peerdiscovery's view is built from the same Leases,
// but through an extension replica that may lag: a replica whose Lease
// watch was backing off after a kube-apiserver it talked to restarted
// published a just-upgraded server's new resources 27 s late, and the
// servers whose filters read that replica answered 404 for them meanwhile
// (test/nodeplane in CI). A live server's own record is the stronger fact:
// a request for a resource it records is never a 404 here.
type leaseRecords struct {
	// servers is keyed by server ID; copied on write, read without locks.
	servers atomic.Pointer[map[string]*recordedServer]
	mu      sync.Mutex // serializes writers
	now     func() time.Time
}

// recordedServer is one registration Lease, parsed.
type recordedServer struct {
	// raw is the served-resources annotation the sets were decoded from: a
	// renewal that records the same list reuses them.
	raw  string
	reg  peerlease.Registration
	gvrs map[schema.GroupVersionResource]struct{}
	gvs  map[schema.GroupVersion]struct{}
}

func newLeaseRecords(now func() time.Time) *leaseRecords {
	l := &leaseRecords{now: now}
	l.servers.Store(&map[string]*recordedServer{})
	return l
}

// start watches the registration Leases over the loopback client.
func (l *leaseRecords) start(ctx context.Context, loopback *rest.Config) error {
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return err
	}
	lw := cache.NewFilteredListWatchFromClient(client.CoordinationV1().RESTClient(), "leases", peerlease.Namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = peerlease.RegistrationLabel + "=" + peerlease.RegistrationComponent
	})
	l.run(ctx, lw)
	return nil
}

// run starts the informer over lw.
func (l *leaseRecords) run(ctx context.Context, lw cache.ListerWatcher) {
	logger := klog.FromContext(ctx)
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o interface{}) (interface{}, error) {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return o, nil
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { l.set(logger, o) },
		UpdateFunc: func(_, o interface{}) { l.set(logger, o) },
		DeleteFunc: func(o interface{}) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if lease, ok := o.(*coordinationv1.Lease); ok && lease.Spec.HolderIdentity != nil {
				l.update(func(m map[string]*recordedServer) { delete(m, *lease.Spec.HolderIdentity) })
			}
		},
	})
	go inf.Run(ctx.Done())
}

func (l *leaseRecords) update(change func(map[string]*recordedServer)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := maps.Clone(*l.servers.Load())
	change(next)
	l.servers.Store(&next)
}

// set records one Lease. A broken one records nothing (peerdiscovery
// ignores it too).
func (l *leaseRecords) set(logger klog.Logger, o interface{}) {
	lease, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	raw := lease.Annotations[peerlease.ServedResourcesAnnotation]
	l.update(func(m map[string]*recordedServer) {
		var prev *recordedServer
		if h := lease.Spec.HolderIdentity; h != nil {
			prev = m[*h]
		}
		// A renewal every few seconds rarely changes the record: the sets
		// decoded from it last time serve, and it is not decoded again.
		reuse := prev != nil && prev.raw == raw
		parse := peerlease.ParseRegistration
		if reuse {
			parse = peerlease.ParseRegistrationSkippingServed
		}
		reg, err := parse(lease)
		if err != nil {
			logger.V(4).Info("peerdiscovery filter: ignoring a broken registration lease", "lease", lease.Name, "err", err)
			return
		}
		s := &recordedServer{raw: raw, reg: reg}
		if reuse {
			s.gvrs, s.gvs = prev.gvrs, prev.gvs
		} else {
			s.gvrs = make(map[schema.GroupVersionResource]struct{}, len(reg.Served))
			s.gvs = map[schema.GroupVersion]struct{}{}
			for _, r := range reg.Served {
				s.gvrs[r.GroupVersionResource] = struct{}{}
				s.gvs[r.GroupVersion()] = struct{}{}
			}
		}
		s.reg.Served = nil // the sets hold it
		m[reg.ServerID] = s
	})
}

// leaseState is what a server's registration Lease says of it now.
type leaseState int

const (
	leaseUnknown  leaseState = iota // no registration Lease (or a broken one)
	leaseLive                       // renewed, no departure recorded
	leaseDeparted                   // the server recorded a graceful shutdown
	leaseLapsed                     // not renewed in time: crashed, frozen or cut off
)

// state tells what the registration Lease of server id says now.
func (l *leaseRecords) state(id string) leaseState {
	s, ok := (*l.servers.Load())[id]
	switch {
	case !ok:
		return leaseUnknown
	case s.reg.Departed():
		return leaseDeparted
	case s.reg.Live(l.now()):
		return leaseLive
	default:
		return leaseLapsed
	}
}

// goneForGood tells whether server id's registration Lease records a
// departure, or lapsed longer than routing.RecoveryWindow ago: the server
// is not expected back within seconds.
func (l *leaseRecords) goneForGood(id string) bool {
	s, ok := (*l.servers.Load())[id]
	if !ok {
		return false
	}
	now := l.now()
	return !s.reg.Live(now) && !routing.Recovering(s.reg.Departed(), s.reg.GoneAt(), now)
}

// recordedBy lists the live servers other than self whose Lease records
// gvr, as routing peers at the endpoints their Leases give (their view's
// readiness, if any, is the proxy's to check).
func (l *leaseRecords) recordedBy(self string, gvr schema.GroupVersionResource) []routing.Peer {
	now := l.now()
	var out []routing.Peer
	for id, s := range *l.servers.Load() {
		if _, ok := s.gvrs[gvr]; ok && id != self && s.reg.Live(now) {
			out = append(out, routing.Peer{ID: id, Endpoint: s.reg.Endpoint, Ready: true})
		}
	}
	return out
}

// recordedElsewhere returns a live server other than self whose Lease
// records gvr (the first by ID), if any. Departed and lapsed servers do not
// count: their tombstones are peerdiscovery's to keep.
func (l *leaseRecords) recordedElsewhere(self string, gvr schema.GroupVersionResource) (string, bool) {
	return l.first(self, func(s *recordedServer) bool { _, ok := s.gvrs[gvr]; return ok })
}

// groupVersionRecordedElsewhere is recordedElsewhere for a group-version.
func (l *leaseRecords) groupVersionRecordedElsewhere(self string, gv schema.GroupVersion) (string, bool) {
	return l.first(self, func(s *recordedServer) bool { _, ok := s.gvs[gv]; return ok })
}

// groupRecordedElsewhere is recordedElsewhere for a group: the server and
// the first of its recorded versions of the group.
func (l *leaseRecords) groupRecordedElsewhere(self, group string) (schema.GroupVersion, string, bool) {
	inGroup := func(s *recordedServer) []schema.GroupVersion {
		var out []schema.GroupVersion
		for gv := range s.gvs {
			if gv.Group == group {
				out = append(out, gv)
			}
		}
		return out
	}
	id, ok := l.first(self, func(s *recordedServer) bool { return len(inGroup(s)) > 0 })
	if !ok {
		return schema.GroupVersion{}, "", false
	}
	s := (*l.servers.Load())[id]
	if s == nil { // deleted meanwhile
		return schema.GroupVersion{}, "", false
	}
	gvs := inGroup(s)
	if len(gvs) == 0 { // replaced meanwhile
		return schema.GroupVersion{}, "", false
	}
	return slices.MinFunc(gvs, func(a, b schema.GroupVersion) int { return strings.Compare(a.Version, b.Version) }), id, true
}

func (l *leaseRecords) first(self string, records func(*recordedServer) bool) (string, bool) {
	now := l.now()
	found := ""
	for id, s := range *l.servers.Load() {
		if id == self || !s.reg.Live(now) || !records(s) {
			continue
		}
		if found == "" || id < found {
			found = id
		}
	}
	return found, found != ""
}
