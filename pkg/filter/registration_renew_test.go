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
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

func TestRegistrationRenewsWithoutRereading(t *testing.T) {
	cs := fake.NewClientset()
	checkResourceVersions(cs)
	r := newTestRegistrar(cs, localServing().ServedRecord)
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases(peerlease.Namespace)
	r.renew(ctx)
	cs.ClearActions()
	for range 3 {
		r.renew(ctx)
	}
	if v := verbs(cs); !slices.Equal(v, []string{"update", "update", "update"}) {
		t.Errorf("three renewals: %v, want three updates and no read", v)
	}

	// An admin's edit moves the resourceVersion on: the next renewal
	// conflicts, reads and renews, keeping the edit.
	l, _ := getRegistration(t, cs)
	l.Labels["edited"] = "yes"
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	r.renew(ctx)
	l, reg := getRegistration(t, cs)
	v := verbs(cs)
	if served, _ := getServed(t, cs); l.Labels["edited"] != "yes" || reg.Departed() || !reflect.DeepEqual(served, servingWant) {
		t.Errorf("after a conflict: labels %v, served %v", l.Labels, served)
	}
	if !slices.Equal(v, []string{"update", "get", "update", "get"}) {
		t.Errorf("a renewal after someone else's write: %v", v)
	}

	// Deleted (say, collected by mistake): the next renewal creates it.
	if err := leases.Delete(ctx, peerlease.LeaseName(regID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.renew(ctx)
	if _, reg := getRegistration(t, cs); reg.Departed() || reg.Endpoint != regEndpoint {
		t.Errorf("after a delete: %+v", reg)
	}
	cs.ClearActions()
	r.renew(ctx)
	if v := verbs(cs); !slices.Equal(v, []string{"update"}) {
		t.Errorf("the renewal after the re-creation: %v", v)
	}
}

// checkResourceVersions makes cs's Lease writes behave as the API
// server's do: each write moves the resourceVersion on, and an update
// that carries another version than the stored one is a conflict (the
// fake's tracker keeps whatever version it is given).
func checkResourceVersions(cs *fake.Clientset) {
	var rv atomic.Int64
	cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		w, ok := a.(clienttesting.UpdateAction) // creates have the same methods
		if !ok || (a.GetVerb() != "create" && a.GetVerb() != "update") {
			return false, nil, nil
		}
		l := w.GetObject().(*coordinationv1.Lease)
		if a.GetVerb() == "update" {
			stored, err := cs.Tracker().Get(leasesGVR, l.Namespace, l.Name)
			if err != nil {
				return true, nil, err
			}
			if got := stored.(*coordinationv1.Lease).ResourceVersion; got != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), l.Name, fmt.Errorf("resourceVersion %q, stored %q", l.ResourceVersion, got))
			}
		}
		l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return false, nil, nil
	})
}

// A renewal resets the managed fields, so that the server records only
// what it changed (spec.renewTime) in each write; the Lease's first write
// keeps the server's full entry. test/e2e's TestRenewalsCarryOnlyLiveness
// checks what a real server stores.
func TestRegistrationRenewalsResetManagedFields(t *testing.T) {
	cs := fake.NewClientset()
	checkResourceVersions(cs)
	r := newTestRegistrar(cs, localServing().ServedRecord)
	ctx := context.Background()
	for range 3 {
		if !r.renew(ctx) {
			t.Fatal("a renewal failed")
		}
	}
	var got []string
	for _, a := range cs.Actions() {
		w, ok := a.(clienttesting.UpdateAction)
		if !ok || (a.GetVerb() != "create" && a.GetVerb() != "update") {
			continue
		}
		l := w.GetObject().(*coordinationv1.Lease)
		if !peerlease.IsRegistration(l) {
			continue
		}
		reset := reflect.DeepEqual(l.ManagedFields, []metav1.ManagedFieldsEntry{{}})
		got = append(got, fmt.Sprintf("%s reset=%v", a.GetVerb(), reset))
	}
	if want := []string{"create reset=false", "update reset=true", "update reset=true"}; !slices.Equal(got, want) {
		t.Errorf("registration writes: %v, want %v", got, want)
	}
}

// A failed renewal is tried again after peerlease.RenewRetryInterval, not
// a whole renewal interval later: a server back from a partition or an
// etcd outage is live again within a second or so.
func TestRegistrationRetriesAFailedRenewalSoon(t *testing.T) {
	cs := fake.NewClientset()
	var failing atomic.Bool
	failing.Store(true)
	var attempts atomic.Int32
	cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" {
			attempts.Add(1)
		}
		if failing.Load() {
			return true, nil, errors.New("etcd unreachable")
		}
		return false, nil, nil
	})
	r := newTestRegistrar(cs, localServing().ServedRecord)
	clk := r.clock.(*clocktesting.FakeClock)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// waitBlocked waits until the loop waits for its timer after n
	// attempts to create a Lease (the served record's and the registration's).
	waitBlocked := func(what string, n int32) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for attempts.Load() < n || !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d create attempts, waiters %v", what, attempts.Load(), clk.HasWaiters())
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The first renewal fails: a GET fails, so nothing is created.
	waitBlocked("the first renewal", 0)
	failing.Store(false)
	clk.Step(peerlease.RenewRetryInterval)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(ctx, peerlease.LeaseName(regID), metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration Lease %v after a failed renewal (want the retry then)", peerlease.RenewRetryInterval)
		}
		time.Sleep(time.Millisecond)
	}
	// Renewed: the next one comes a whole interval later.
	waitBlocked("the retry", 2)
	cs.ClearActions()
	clk.Step(peerlease.RenewRetryInterval)
	time.Sleep(50 * time.Millisecond)
	if v := verbs(cs); len(v) != 0 {
		t.Errorf("%v after a successful renewal: %v, want nothing until %v", peerlease.RenewRetryInterval, v, peerlease.DefaultRenewInterval)
	}
	clk.Step(peerlease.DefaultRenewInterval - peerlease.RenewRetryInterval)
	deadline = time.Now().Add(30 * time.Second)
	for !slices.Contains(verbs(cs), "update") {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal %v after the last: %v", peerlease.DefaultRenewInterval, verbs(cs))
		}
		time.Sleep(time.Millisecond)
	}
}
