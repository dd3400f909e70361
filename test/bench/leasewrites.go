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

package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// Lease classes: what writes them.
const (
	LeaseRegistration = "registration"  // the filter's, renewed every 5 s
	LeaseServedRecord = "served record" // the filter's, written on change
	LeaseIdentity     = "identity"      // kube-apiserver's own (APIServerIdentity)
)

// LeaseWrites is the Lease writes of one class on one plane over a window:
// each is an etcd write and a watch event that every kube-apiserver's
// watch cache decodes.
type LeaseWrites struct {
	Routing string `json:"routing"`
	Class   string `json:"class"`
	Events  int    `json:"events"`
	// Bytes is the sum of the objects as kube-apiserver stores them in
	// etcd (protobuf, its envelope included; etcd's own key and revision
	// overhead not counted).
	Bytes  int64         `json:"bytes"`
	Window time.Duration `json:"window"`
}

// BytesPerSecond and EventsPerSecond are over the window.
func (w LeaseWrites) BytesPerSecond() float64 { return float64(w.Bytes) / w.Window.Seconds() }
func (w LeaseWrites) EventsPerSecond() float64 {
	return float64(w.Events) / w.Window.Seconds()
}

// leaseClass is l's class, or "" for a Lease of none.
func leaseClass(l *coordinationv1.Lease) string {
	switch {
	case l.Labels[peerlease.RegistrationLabel] == peerlease.RegistrationComponent:
		return LeaseRegistration
	case l.Labels[peerlease.RegistrationLabel] == peerlease.ServedComponent:
		return LeaseServedRecord
	case l.Labels[peerlease.IdentityLabel] == peerlease.IdentityComponent:
		return LeaseIdentity
	}
	return ""
}

// leaseEncoder encodes a Lease as kube-apiserver writes it to etcd.
var leaseEncoder = scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), coordinationv1.SchemeGroupVersion)

// storedSize is the size of l as kube-apiserver stores it.
func storedSize(l *coordinationv1.Lease) (int64, error) {
	var buf bytes.Buffer
	if err := leaseEncoder.Encode(l, &buf); err != nil {
		return 0, err
	}
	return int64(buf.Len()), nil
}

// leaseWatch counts one plane's Lease writes by class from a watch of the
// Leases' namespace, started now; done ends it and returns the counts.
type leaseWatch struct {
	routing string
	start   time.Time
	cancel  context.CancelFunc
	result  chan leaseWatchResult
}

type leaseWatchResult struct {
	writes map[string]*LeaseWrites
	err    error
}

func startLeaseWatch(ctx context.Context, pl *Plane) (*leaseWatch, error) {
	client, err := kubernetes.NewForConfig(pl.C.AdminConfig(0))
	if err != nil {
		return nil, err
	}
	leases := client.CoordinationV1().Leases(peerlease.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("%s: listing Leases: %w", pl.Routing, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &leaseWatch{routing: pl.Routing.String(), start: time.Now(), cancel: cancel, result: make(chan leaseWatchResult, 1)}
	go func() {
		writes := map[string]*LeaseWrites{}
		rv := list.ResourceVersion
		var failed error
		// A watch the server ends is resumed from the last event seen.
		for ctx.Err() == nil && failed == nil {
			var wi watch.Interface
			if wi, failed = leases.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}); failed != nil {
				break
			}
			rv, failed = countLeaseWrites(ctx, wi, writes, w.routing)
			wi.Stop()
		}
		if ctx.Err() != nil {
			failed = nil // ended by done
		}
		w.result <- leaseWatchResult{writes: writes, err: failed}
	}()
	return w, nil
}

// countLeaseWrites adds wi's events to writes until it ends, and returns
// the last resource version seen.
func countLeaseWrites(ctx context.Context, wi watch.Interface, writes map[string]*LeaseWrites, routing string) (string, error) {
	rv := ""
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return rv, nil
			}
			if ev.Type == watch.Error {
				return rv, fmt.Errorf("%s: Lease watch: %v", routing, ev.Object)
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				return rv, fmt.Errorf("%s: Lease watch: a %T", routing, ev.Object)
			}
			rv = l.ResourceVersion
			class := leaseClass(l)
			if ev.Type == watch.Bookmark || class == "" {
				continue
			}
			size, err := storedSize(l)
			if err != nil {
				return rv, err
			}
			if writes[class] == nil {
				writes[class] = &LeaseWrites{Routing: routing, Class: class}
			}
			writes[class].Events++
			writes[class].Bytes += size
		}
	}
}

// done ends the watch and returns its counts, every class present.
func (w *leaseWatch) done() ([]LeaseWrites, error) {
	window := time.Since(w.start)
	w.cancel()
	r := <-w.result
	var out []LeaseWrites
	for _, class := range []string{LeaseRegistration, LeaseServedRecord, LeaseIdentity} {
		lw := LeaseWrites{Routing: w.routing, Class: class}
		if c := r.writes[class]; c != nil {
			lw = *c
		}
		lw.Window = window
		out = append(out, lw)
	}
	return out, r.err
}
