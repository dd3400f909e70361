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
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

const (
	// departTimeout bounds recording the departure on shutdown (a read
	// and a write over loopback); the process may exit any moment.
	departTimeout = 3 * time.Second
	// leaseGCTimeout bounds one garbage collection pass.
	leaseGCTimeout = 30 * time.Second
	// servedRecheck is how often the served-record Lease is read again
	// while the record stays the same: one GET a minute, no write.
	servedRecheck = time.Minute
)

// registrar owns this server's registration Lease (format in
// pkg/peerlease) and collects the Leases of servers long gone.
type registrar struct {
	leases                      coordinationclient.LeaseInterface
	serverID, endpoint, version string
	// served is what this server serves itself (EncodeServed's list and
	// its discovery's ETags), zero while unknown. It is written to the
	// served-record Lease when it changes, before the renewal
	// (peerlease.NewServedLease), so a crash leaves it behind and a
	// renewal carries only liveness.
	served func(context.Context) peerlease.ServedContent
	// lastServed is the record last written (or found written) at
	// servedVerified; touched only by the renewal loop and the departure
	// after it.
	lastServed     peerlease.ServedContent
	servedVerified time.Time
	// listed tells whether peerdiscovery's view lists a server (its
	// tombstone lasts), and whether this filter knows the view at all.
	listed func(serverID string) (listed, known bool)
	// A departed or lapsed Lease is collected once gone for retention and
	// no longer listed (its tombstone ended), or after maxRetention in any
	// case; gcInterval is how often a pass looks.
	retention, maxRetention, gcInterval time.Duration
	clock                               clock.WithTickerAndDelayedExecution

	// last is the Lease as the previous renewal wrote it (nil: unknown),
	// touched only by the renewal loop. Renewing from it saves a read per
	// renewal; a conflict or a missing Lease falls back to reading it.
	last *coordinationv1.Lease
	// departed stops the renewals once the departure is recorded (a
	// renewal would drop it) and makes a second record a no-op.
	departed atomic.Bool
}

// startRegistration publishes this server's registration Lease with what
// it serves, renews it every peerlease.DefaultRenewInterval (recording
// what it serves again whenever that changes) and, when the server shuts
// down gracefully, records the departure in it (so peers stop routing here
// at once). Every replica of peerdiscovery-apiserver, started at any time,
// reads this server's routes and tombstone from the Lease, whether it left
// gracefully or crashed. It also collects Leases whose tombstone ended.
func startRegistration(ctx context.Context, loopback *rest.Config, serverID, endpoint, version string, served func(context.Context) peerlease.ServedContent, listed func(string) (bool, bool), opts Options, clk clock.WithTickerAndDelayedExecution) (*registrar, error) {
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return nil, err
	}
	r := &registrar{
		leases:   client.CoordinationV1().Leases(peerlease.Namespace),
		serverID: serverID, endpoint: endpoint, version: version, served: served, listed: listed,
		retention: opts.RegistrationLeaseRetention, maxRetention: opts.RegistrationLeaseMaxRetention,
		gcInterval: opts.RegistrationLeaseGCInterval,
		clock:      clk,
	}
	go r.run(ctx)
	go r.collectLoop(ctx)
	return r, nil
}

// run renews the Lease until ctx is done, then records the departure.
//
// This loop is kept instead of k8s.io/component-helpers' lease.NewController
// because that controller's (*controller).newLease sets spec.renewTime to
// now before it calls the post-process function: the function then cannot
// tell a Lease that lapsed (the server was cut off longer than its
// duration) from a live one, and a server back after a lapse must hold its
// Lease anew (a fresh acquireTime, peerlease.NewRegistrationLease), or the
// peer engine ranks it below an identity that registered at its endpoint
// meanwhile. Its Start and Stop also delete the Lease, where this filter
// records a departure in it instead.
func (r *registrar) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		next := peerlease.DefaultRenewInterval
		if !r.renew(ctx) {
			next = peerlease.RenewRetryInterval
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), departTimeout)
			defer cancel()
			if err := r.depart(klog.NewContext(dctx, logger)); err != nil {
				logger.Info("peerdiscovery filter: recording the departure in the registration lease failed; it lapses by itself", "err", err)
			}
			return
		case <-r.clock.After(next):
		}
	}
}

// renew creates or renews the Lease; renewing drops a departure recorded
// by an earlier run under the same ID. It tells whether the Lease is
// renewed (or the departure recorded).
func (r *registrar) renew(ctx context.Context) bool {
	if r.departed.Load() {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, peerlease.DefaultRenewInterval)
	defer cancel()
	name := peerlease.LeaseName(r.serverID)
	// The record first: a reader that sees this renewal has it (one watch
	// of the Leases delivers both in order).
	r.recordServed(rctx, r.served(ctx))
	renewal := func(existing *coordinationv1.Lease) *coordinationv1.Lease {
		l := peerlease.NewRegistrationLease(existing, r.serverID, r.endpoint, r.version, "", r.clock.Now())
		if r.lastServed.Served != "" {
			// Held by the served-record Lease; until it is, a record the
			// Lease carries (a filter from before it) stays.
			peerlease.DropServed(l)
		}
		if existing != nil {
			// Reset the managed fields: the server then records only what
			// this renewal changed (spec.renewTime), not an entry owning
			// every label, annotation and spec field, in each of the
			// writes every watch cache decodes (395 bytes as stored
			// on the bench's plane, not 754).
			l.ManagedFields = []metav1.ManagedFieldsEntry{{}}
		}
		return l
	}
	var (
		written *coordinationv1.Lease
		err     error
	)
	if r.last != nil {
		written, err = r.leases.Update(rctx, renewal(r.last), metav1.UpdateOptions{})
	}
	if r.last == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Changed or deleted by someone else (collection, an admin), or
		// not read yet: read it, and renew what is there.
		var existing *coordinationv1.Lease
		existing, err = r.leases.Get(rctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			written, err = r.leases.Create(rctx, renewal(nil), metav1.CreateOptions{})
		case err == nil:
			written, err = r.leases.Update(rctx, renewal(existing), metav1.UpdateOptions{})
		}
	}
	r.last = written
	if err != nil {
		r.last = nil
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("peerdiscovery filter: renewing the registration lease failed; trying again", "lease", name, "err", err, "in", peerlease.RenewRetryInterval)
		}
		return false
	}
	return true
}

// recordServed writes the served-record Lease when served differs from
// what was last written (no list: not known yet, nothing to write), and
// reads it again every servedRecheck: one deleted or changed by someone
// else (an admin, a collection racing a restart) is written again. A
// failure is tried again at the next renewal.
func (r *registrar) recordServed(ctx context.Context, served peerlease.ServedContent) {
	if served.Served == "" || (served == r.lastServed && r.clock.Since(r.servedVerified) < servedRecheck) {
		return
	}
	existing, err := r.leases.Get(ctx, peerlease.ServedLeaseName(r.serverID), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = r.leases.Create(ctx, peerlease.NewServedLease(nil, r.serverID, served), metav1.CreateOptions{})
	case err == nil && served.Holds(existing):
		// Written by this server's previous run.
	case err == nil:
		_, err = r.leases.Update(ctx, peerlease.NewServedLease(existing, r.serverID, served), metav1.UpdateOptions{})
	}
	if err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("peerdiscovery filter: writing the served-record lease failed", "lease", peerlease.ServedLeaseName(r.serverID), "err", err)
		}
		return
	}
	r.lastServed, r.servedVerified = served, r.clock.Now()
}

// depart records the departure time in the Lease instead of deleting it:
// a deleted Lease tells a replica that starts later nothing, and each
// replica would date the departure by its own clock. What the server
// served is in its served-record Lease, brought up to date first.
// Collection deletes both Leases once its tombstone ended.
func (r *registrar) depart(ctx context.Context) error {
	if !r.departed.CompareAndSwap(false, true) {
		return nil // recorded already (the pre-shutdown hook, then the end of the loop)
	}
	at := r.clock.Now()
	r.recordServed(ctx, r.served(ctx))
	const served = "" // the served-record Lease holds it
	name := peerlease.LeaseName(r.serverID)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var existing *coordinationv1.Lease
		existing, err = r.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := peerlease.NewRegistrationLease(nil, r.serverID, r.endpoint, r.version, served, at)
			_, err = r.leases.Create(ctx, peerlease.MarkDeparted(l, at, served), metav1.CreateOptions{})
		case err == nil:
			_, err = r.leases.Update(ctx, peerlease.MarkDeparted(existing, at, served), metav1.UpdateOptions{})
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return err
}

// collectLoop runs collect about every gcInterval, jittered so that the
// servers of a control plane do not all list at once.
func (r *registrar) collectLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(wait.Jitter(r.gcInterval, 1.0)):
		}
		cctx, cancel := context.WithTimeout(ctx, leaseGCTimeout)
		n, err := r.collect(cctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			logger.V(2).Info("peerdiscovery filter: collecting old registration leases failed", "err", err)
		}
		if n > 0 {
			logger.V(2).Info("peerdiscovery filter: deleted old registration leases", "count", n)
		}
	}
}

// collect deletes the registration Leases whose server is gone for good,
// and returns how many it deleted: gone for the retention and no longer
// listed by peerdiscovery (its tombstone ended, so no replica, even one
// started now, needs the Lease), or gone for the maximum retention
// whatever the view says (peerdiscovery is not installed or out of reach).
// Each delete is conditional on the resourceVersion that was judged, so a
// Lease renewed meanwhile (its server came back) survives; other servers
// collecting at the same time make the delete a harmless conflict or
// not-found.
func (r *registrar) collect(ctx context.Context) (int, error) {
	list, err := r.leases.List(ctx, metav1.ListOptions{
		LabelSelector: peerlease.ComponentSelector,
		// The watch cache is enough: the precondition catches a stale copy.
		ResourceVersion: "0",
	})
	if err != nil {
		return 0, err
	}
	now := r.clock.Now()
	deleted := 0
	// registered holds the servers whose registration Lease stays.
	registered := map[string]bool{}
	for i := range list.Items {
		l := &list.Items[i]
		if !peerlease.IsRegistration(l) {
			continue
		}
		if !r.collectable(l, now) {
			if l.Spec.HolderIdentity != nil {
				registered[*l.Spec.HolderIdentity] = true
			}
			continue
		}
		n, err := r.deleteLease(ctx, l)
		if n == 0 && l.Spec.HolderIdentity != nil {
			// Renewed meanwhile (or gone already): its record stays
			// this pass.
			registered[*l.Spec.HolderIdentity] = true
		}
		if deleted += n; err != nil {
			return deleted, err
		}
	}
	// A served record goes with its server's registration Lease; one
	// written just before its first registration is younger than the
	// retention.
	for i := range list.Items {
		l := &list.Items[i]
		if !peerlease.IsServedRecord(l) || (l.Spec.HolderIdentity != nil && registered[*l.Spec.HolderIdentity]) ||
			!l.CreationTimestamp.Time.Before(now.Add(-r.retention)) {
			continue
		}
		n, err := r.deleteLease(ctx, l)
		if deleted += n; err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

// deleteLease deletes l as listed (preconditions: its resourceVersion and
// UID); 1 when it did.
func (r *registrar) deleteLease(ctx context.Context, l *coordinationv1.Lease) (int, error) {
	rv, uid := l.ResourceVersion, l.UID
	pre := &metav1.Preconditions{}
	if rv != "" {
		pre.ResourceVersion = &rv
	}
	if uid != "" {
		pre.UID = &uid
	}
	err := r.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: pre})
	switch {
	case err == nil:
		return 1, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return 0, nil
	}
	return 0, err
}

// collectable tells whether a registration Lease's server is gone for good.
func (r *registrar) collectable(l *coordinationv1.Lease, now time.Time) bool {
	gone := peerlease.GoneSince(l)
	if gone.Before(now.Add(-r.maxRetention)) {
		return true
	}
	if !gone.Before(now.Add(-r.retention)) {
		return false
	}
	// The holder is the server ID (a broken Lease has none: only the
	// maximum retention collects it).
	if l.Spec.HolderIdentity == nil || r.listed == nil {
		return false
	}
	listed, known := r.listed(*l.Spec.HolderIdentity)
	return known && !listed
}
