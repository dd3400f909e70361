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

package replication

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
)

type fakeRoles struct{ state atomic.Bool }

func (f *fakeRoles) Lead() error    { f.state.Store(true); return nil }
func (f *fakeRoles) Demote()        {}
func (f *fakeRoles) HasState() bool { return f.state.Load() }

func electionConfig(t *testing.T, kube *fake.Clientset) ElectionConfig {
	t.Helper()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "peerdiscovery", "peerdiscovery-apiserver",
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: NewIdentity("10.0.0.2:6443")})
	if err != nil {
		t.Fatal(err)
	}
	return ElectionConfig{Lock: lock, LeaseDuration: 400 * time.Millisecond, RenewDeadline: 300 * time.Millisecond, RetryPeriod: 20 * time.Millisecond}
}

func electionLease(holder string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "peerdiscovery", Name: "peerdiscovery-apiserver"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: ptr.To(metav1.NewMicroTime(renew)), AcquireTime: ptr.To(metav1.NewMicroTime(renew))},
	}
}

// A fresh replica stays out of the election while a replica with state can
// lead: it follows the live leader until it holds a copy, and after a
// release it gives the others a LeaseDuration to take over.
func TestAwaitTurnYieldsToReplicasWithState(t *testing.T) {
	ctx := context.Background()
	t.Run("first start", func(t *testing.T) {
		roles := &fakeRoles{}
		cfg := electionConfig(t, fake.NewClientset())
		start := time.Now()
		awaitTurn(ctx, cfg, roles, func(string) { t.Error("nobody to follow") })
		if time.Since(start) > 200*time.Millisecond {
			t.Fatalf("no Lease yet: campaigned after %s, want at once", time.Since(start))
		}
	})
	t.Run("live leader", func(t *testing.T) {
		leader := NewIdentity("10.0.0.1:6443")
		roles := &fakeRoles{}
		var followed atomic.Value
		done := make(chan struct{})
		go func() {
			defer close(done)
			awaitTurn(ctx, electionConfig(t, fake.NewClientset(electionLease(leader, time.Now()))), roles, func(id string) { followed.Store(id) })
		}()
		time.Sleep(600 * time.Millisecond) // more than LeaseDuration: the live leader keeps it waiting
		select {
		case <-done:
			t.Fatal("campaigned while a live leader was there and this replica had no state")
		default:
		}
		if followed.Load() != leader {
			t.Fatalf("followed %v, want %s", followed.Load(), leader)
		}
		roles.state.Store(true) // the snapshot arrived
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("still waiting with state")
		}
	})
	t.Run("released", func(t *testing.T) {
		roles := &fakeRoles{}
		cfg := electionConfig(t, fake.NewClientset(electionLease("", time.Now())))
		start := time.Now()
		awaitTurn(ctx, cfg, roles, func(string) { t.Error("nobody to follow") })
		if took := time.Since(start); took < 400*time.Millisecond {
			t.Fatalf("campaigned after %s, want a LeaseDuration's wait for a replica with state", took)
		}
	})
	t.Run("has state", func(t *testing.T) {
		roles := &fakeRoles{}
		roles.state.Store(true)
		cfg := electionConfig(t, fake.NewClientset(electionLease(NewIdentity("10.0.0.1:6443"), time.Now())))
		start := time.Now()
		awaitTurn(ctx, cfg, roles, func(string) {})
		if time.Since(start) > 200*time.Millisecond {
			t.Fatal("a replica with state campaigns at once")
		}
	})
}
