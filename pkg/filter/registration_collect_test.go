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
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

func regLeaseAt(id string, renewed time.Time, rv string) *coordinationv1.Lease {
	l := peerlease.NewRegistrationLease(nil, id, regEndpoint, "v1.37.2", "", renewed)
	l.ResourceVersion = rv
	l.UID = types.UID("uid-" + id)
	return l
}

// Collection deletes the Leases whose server is gone for good: gone for
// the retention and no longer listed by peerdiscovery (its tombstone
// ended), or gone for the maximum retention whatever the view says; each
// only in the version it judged.
func TestRegistrationLeaseCollection(t *testing.T) {
	hour := time.Hour
	departedOld := peerlease.MarkDeparted(regLeaseAt("departed-2h", regNow.Add(-2*hour), "11"), regNow.Add(-2*hour), "")
	departedListed := peerlease.MarkDeparted(regLeaseAt("departed-30m-listed", regNow.Add(-30*time.Minute), "12"), regNow.Add(-30*time.Minute), "")
	departedUnlisted := peerlease.MarkDeparted(regLeaseAt("departed-30m", regNow.Add(-30*time.Minute), "13"), regNow.Add(-30*time.Minute), "")
	// Renewed until 5 minutes ago, then departed with a time an hour
	// back (a skewed clock): gone since the departure.
	departedSkewed := peerlease.MarkDeparted(regLeaseAt("departed-skewed", regNow.Add(-5*time.Minute), "14"), regNow.Add(-90*time.Minute), "")
	lapsedOld := regLeaseAt("lapsed-2h", regNow.Add(-2*hour), "15")
	lapsedUnlisted := regLeaseAt("lapsed-20m", regNow.Add(-20*time.Minute), "16")
	// Crashed 5 minutes ago: within the retention, even unlisted.
	lapsedRecent := regLeaseAt("lapsed-5m", regNow.Add(-5*time.Minute), "17")
	live := regLeaseAt("live", regNow.Add(-time.Second), "18")
	renewedMeanwhile := regLeaseAt("renewed-meanwhile", regNow.Add(-3*hour), "19")
	// Not ours: another component's Lease in kube-system, long lapsed.
	foreign := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: peerlease.Namespace, ResourceVersion: "20"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("x"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(regNow.Add(-5 * hour))),
		},
	}
	// Served records: each goes with its server's registration Lease; one
	// without a registration is kept while younger than the retention
	// (written just before its first registration).
	servedAt := func(id string, created time.Time, rv string) *coordinationv1.Lease {
		l := peerlease.NewServedLease(nil, id, peerlease.ServedContent{Served: ""})
		l.CreationTimestamp, l.ResourceVersion, l.UID = metav1.NewTime(created), rv, types.UID("uid-served-"+id)
		return l
	}
	all := []runtime.Object{departedOld, departedListed, departedUnlisted, departedSkewed, lapsedOld, lapsedUnlisted, lapsedRecent, live, renewedMeanwhile, foreign,
		servedAt("departed-2h", regNow.Add(-3*hour), "22"), servedAt("live", regNow.Add(-3*hour), "23"),
		servedAt("orphan-young", regNow.Add(-time.Minute), "24"), servedAt("orphan-old", regNow.Add(-2*hour), "25"),
		// Its server renews between the list and the delete: both stay.
		servedAt("renewed-meanwhile", regNow.Add(-3*hour), "26")}
	// The view lists the live server and one that departed 30 minutes ago
	// (a tombstone longer than the default).
	listed := func(id string) (bool, bool) { return id == "live" || id == "departed-30m-listed", true }

	collect := func(t *testing.T, listed func(string) (bool, bool)) (left, tried []string, n int) {
		t.Helper()
		cs := fake.NewClientset(all...)
		// The API server's preconditions, which the fake does not check;
		// and renewed-meanwhile's server renews it between the list and
		// the delete.
		cs.PrependReactor("delete", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
			d := a.(clienttesting.DeleteActionImpl)
			if d.Name == peerlease.LeaseName("renewed-meanwhile") {
				renewed := peerlease.NewRegistrationLease(renewedMeanwhile, "renewed-meanwhile", regEndpoint, "v1.37.2", "", regNow)
				renewed.ResourceVersion = "21"
				if err := cs.Tracker().Update(leasesGVR, renewed, peerlease.Namespace); err != nil {
					t.Error(err)
				}
			}
			obj, err := cs.Tracker().Get(leasesGVR, peerlease.Namespace, d.Name)
			if err != nil {
				return true, nil, err
			}
			cur := obj.(*coordinationv1.Lease)
			p := d.DeleteOptions.Preconditions
			if p == nil || p.ResourceVersion == nil {
				t.Errorf("delete of %s without a resourceVersion precondition", d.Name)
				return false, nil, nil
			}
			tried = append(tried, strings.TrimPrefix(d.Name, peerlease.NamePrefix))
			if *p.ResourceVersion != cur.ResourceVersion || (p.UID != nil && *p.UID != cur.UID) {
				return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), d.Name, fmt.Errorf("precondition failed"))
			}
			return false, nil, nil // the tracker deletes it
		})
		r := newTestRegistrar(cs, nil)
		r.listed = listed
		n, err := r.collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		list, err := cs.CoordinationV1().Leases(peerlease.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list.Items {
			left = append(left, strings.TrimPrefix(l.Name, peerlease.NamePrefix))
		}
		sort.Strings(left)
		sort.Strings(tried)
		return left, tried, n
	}

	t.Run("view known", func(t *testing.T) {
		left, tried, n := collect(t, listed)
		if want := []string{"departed-30m-listed", "kube-scheduler", "lapsed-5m", "live", "peerdiscovery.served-live", "peerdiscovery.served-orphan-young", "peerdiscovery.served-renewed-meanwhile", "renewed-meanwhile"}; !slices.Equal(left, want) {
			t.Errorf("leases after collection: %v, want %v", left, want)
		}
		if n != 7 {
			t.Errorf("collect reported %d deletions, want 7", n)
		}
		if want := []string{"departed-2h", "departed-30m", "departed-skewed", "lapsed-20m", "lapsed-2h", "peerdiscovery.served-departed-2h", "peerdiscovery.served-orphan-old", "renewed-meanwhile"}; !slices.Equal(tried, want) {
			t.Errorf("deletes tried: %v, want %v", tried, want)
		}
	})
	t.Run("view unknown: only the maximum retention", func(t *testing.T) {
		left, _, n := collect(t, func(string) (bool, bool) { return false, false })
		want := []string{"departed-30m", "departed-30m-listed", "kube-scheduler", "lapsed-20m", "lapsed-5m", "live", "peerdiscovery.served-live", "peerdiscovery.served-orphan-young", "peerdiscovery.served-renewed-meanwhile", "renewed-meanwhile"}
		if !slices.Equal(left, want) || n != 5 {
			t.Errorf("leases after collection: %v (%d deleted), want %v", left, n, want)
		}
	})
}
