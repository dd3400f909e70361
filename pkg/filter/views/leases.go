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
	// raw is, under mu, the served-resources annotation each record's set
	// was decoded from: a renewal that records the same list reuses it.
	raw map[string]string
	now func() time.Time
	// onChange, when set, is called after each change of current (the
	// routing snapshot is published from it).
	onChange func()
}

func newLeases(now func() time.Time) *Leases {
	l := &Leases{now: now, raw: map[string]string{}}
	l.current.Store(&routing.Records{})
	return l
}

// Records returns the current records; read only.
func (l *Leases) Records() routing.Records { return *l.current.Load() }

// Start watches the registration Leases over the loopback client.
func (l *Leases) Start(ctx context.Context, loopback *rest.Config) error {
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
				l.update(func(m routing.Records) {
					delete(m, *lease.Spec.HolderIdentity)
					delete(l.raw, *lease.Spec.HolderIdentity)
				})
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

// Record records one Lease (what the informer does with each). A broken one records nothing (peerdiscovery
// ignores it too).
func (l *Leases) Record(logger klog.Logger, o interface{}) {
	lease, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	raw, hasRaw := lease.Annotations[peerlease.ServedResourcesAnnotation]
	l.update(func(m routing.Records) {
		var prev *routing.Record
		if h := lease.Spec.HolderIdentity; h != nil {
			prev = m[*h]
		}
		// A renewal every few seconds rarely changes the record: the set
		// decoded from it last time serves, and it is not decoded again.
		reuse := prev != nil && hasRaw && l.raw[prev.ID] == raw
		parse := peerlease.ParseRegistration
		if reuse {
			parse = peerlease.ParseRegistrationSkippingServed
		}
		reg, err := parse(lease)
		if err != nil {
			logger.V(4).Info("peerdiscovery filter: ignoring a broken registration lease", "lease", lease.Name, "err", err)
			return
		}
		r := &routing.Record{ID: reg.ServerID, Endpoint: reg.Endpoint, RenewTime: reg.RenewTime, Expires: reg.Expires, Departed: reg.Departed(), DepartedAt: reg.DepartedAt}
		switch {
		case reuse:
			r.Served = prev.Served
		case reg.Served != nil:
			gvrs := make([]schema.GroupVersionResource, len(reg.Served))
			for i, sr := range reg.Served {
				gvrs[i] = sr.GroupVersionResource
			}
			r.Served = routing.NewServed(gvrs)
		}
		m[reg.ServerID] = r
		if hasRaw {
			l.raw[reg.ServerID] = raw
		} else {
			delete(l.raw, reg.ServerID)
		}
	})
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
