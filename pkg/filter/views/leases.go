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

package views

import (
	"context"
	"maps"
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

// Leases knows what every server's registration Lease records it
// serves, from this kube-apiserver's own watch of the Leases (its watch
// cache, fed by etcd). peerdiscovery's view is built from the same Leases,
// but through an extension replica that may lag: a replica whose Lease
// watch was backing off after a kube-apiserver it talked to restarted
// published a just-upgraded server's new resources 27 s late, and the
// servers whose filters read that replica answered 404 for them meanwhile
// (test/nodeplane in CI). A live server's own record is the stronger fact:
// the routing snapshot carries these records, and routing.Decide proxies
// to a live server whose Lease records the resource when the view cannot.
type Leases struct {
	// current is copied on write, read without locks.
	current atomic.Pointer[routing.Records]
	mu      sync.Mutex // serializes writers
	// inline and recorded are, under mu, the served sets by server ID:
	// from registration Leases that carry their record (a filter from
	// before the served-record Lease) and from served-record Leases, each
	// with the annotation it was decoded from, so that an unchanged record
	// is not decoded again. A served-record Lease wins.
	inline, recorded map[string]decodedServed
	now              func() time.Time
	// onChange, when set, is called after each change of current (the
	// routing snapshot is published from it).
	onChange func()
}

// decodedServed is one decoded served-resources annotation.
type decodedServed struct {
	raw string
	set *routing.Served
}

func newLeases(now func() time.Time) *Leases {
	l := &Leases{now: now, inline: map[string]decodedServed{}, recorded: map[string]decodedServed{}}
	l.current.Store(&routing.Records{})
	return l
}

// Records returns the current records; read only.
func (l *Leases) Records() routing.Records { return *l.current.Load() }

// Start watches the registration and served-record Leases over the
// loopback client.
func (l *Leases) Start(ctx context.Context, loopback *rest.Config) error {
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return err
	}
	lw := cache.NewFilteredListWatchFromClient(client.CoordinationV1().RESTClient(), "leases", peerlease.Namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = peerlease.ComponentSelector
	})
	l.run(ctx, lw)
	return nil
}

// run starts the informer over lw.
func (l *Leases) run(ctx context.Context, lw cache.ListerWatcher) {
	logger := klog.FromContext(ctx)
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o interface{}) (interface{}, error) {
		if m, ok := o.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return o, nil
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { l.Record(logger, o) },
		UpdateFunc: func(_, o interface{}) { l.Record(logger, o) },
		DeleteFunc: func(o interface{}) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if lease, ok := o.(*coordinationv1.Lease); ok && lease.Spec.HolderIdentity != nil {
				l.Forget(lease)
			}
		},
	})
	go inf.Run(ctx.Done())
}

func (l *Leases) update(change func(routing.Records)) {
	l.mu.Lock()
	next := maps.Clone(*l.current.Load())
	change(next)
	l.current.Store(&next)
	l.mu.Unlock()
	if l.onChange != nil {
		l.onChange()
	}
}

// Record records one Lease (what the informer does with each). A broken
// one records nothing (peerdiscovery ignores it too).
func (l *Leases) Record(logger klog.Logger, o interface{}) {
	lease, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if peerlease.IsServedRecord(lease) {
		l.recordServed(logger, lease)
		return
	}
	raw, hasRaw := lease.Annotations[peerlease.ServedResourcesAnnotation]
	l.update(func(m routing.Records) {
		// A renewal every few seconds rarely changes an inline record: the
		// set decoded from it last time serves.
		var prev decodedServed
		if h := lease.Spec.HolderIdentity; h != nil {
			prev = l.inline[*h]
		}
		reuse := hasRaw && prev.set != nil && prev.raw == raw
		parse := peerlease.ParseRegistration
		if reuse || !hasRaw {
			parse = peerlease.ParseRegistrationSkippingServed
		}
		reg, err := parse(lease)
		if err != nil {
			logger.V(4).Info("peerdiscovery filter: ignoring a broken registration lease", "lease", lease.Name, "err", err)
			return
		}
		switch {
		case !hasRaw:
			delete(l.inline, reg.ServerID)
		case !reuse:
			l.inline[reg.ServerID] = decodedServed{raw: raw, set: servedSet(reg.Served)}
		}
		r := &routing.Record{ID: reg.ServerID, Endpoint: reg.Endpoint, RenewTime: reg.RenewTime, Expires: reg.Expires, Departed: reg.Departed(), DepartedAt: reg.DepartedAt}
		r.Served = l.servedOf(reg.ServerID)
		m[reg.ServerID] = r
	})
}

// recordServed records a served-record Lease: decoded only when its
// record changed.
func (l *Leases) recordServed(logger klog.Logger, lease *coordinationv1.Lease) {
	raw := lease.Annotations[peerlease.ServedResourcesAnnotation]
	l.mu.Lock()
	prev, seen := l.recorded[ptrValue(lease.Spec.HolderIdentity)]
	l.mu.Unlock()
	if seen && prev.raw == raw {
		return
	}
	rec, err := peerlease.ParseServedRecord(lease)
	if err != nil {
		logger.V(4).Info("peerdiscovery filter: ignoring a broken served-record lease", "lease", lease.Name, "err", err)
		return
	}
	l.update(func(m routing.Records) {
		l.recorded[rec.ServerID] = decodedServed{raw: raw, set: servedSet(rec.Served)}
		l.refresh(m, rec.ServerID)
	})
}

// Forget drops what a deleted Lease recorded.
func (l *Leases) Forget(lease *coordinationv1.Lease) {
	id := ptrValue(lease.Spec.HolderIdentity)
	l.update(func(m routing.Records) {
		if peerlease.IsServedRecord(lease) {
			delete(l.recorded, id)
			l.refresh(m, id)
			return
		}
		delete(m, id)
		delete(l.inline, id)
	})
}

// servedOf is what server id serves as its Leases record it (under mu).
func (l *Leases) servedOf(id string) *routing.Served {
	if d, ok := l.recorded[id]; ok {
		return d.set
	}
	return l.inline[id].set
}

// refresh gives server id's record its served set again (under mu); a
// published record is never modified.
func (l *Leases) refresh(m routing.Records, id string) {
	if r := m[id]; r != nil {
		c := *r
		c.Served = l.servedOf(id)
		m[id] = &c
	}
}

func servedSet(rs []peerlease.ServedResource) *routing.Served {
	if rs == nil {
		return nil
	}
	gvrs := make([]schema.GroupVersionResource, len(rs))
	for i, sr := range rs {
		gvrs[i] = sr.GroupVersionResource
	}
	return routing.NewServed(gvrs)
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// LeaseState is what a server's registration Lease says of it now.
type LeaseState int

const (
	LeaseUnknown  LeaseState = iota // no registration Lease (or a broken one)
	LeaseLive                       // renewed, no departure recorded
	LeaseDeparted                   // the server recorded a graceful shutdown
	LeaseLapsed                     // not renewed in time: crashed, frozen or cut off
)

// State tells what the registration Lease of server id says now.
func (l *Leases) State(id string) LeaseState {
	r, ok := l.Records()[id]
	switch {
	case !ok:
		return LeaseUnknown
	case r.Departed:
		return LeaseDeparted
	case r.Live(l.now()):
		return LeaseLive
	default:
		return LeaseLapsed
	}
}
