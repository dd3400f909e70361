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
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

const regID, regEndpoint = "kube-apiserver-a", "10.0.0.1:6443"

// regNow has no sub-second part, so the departure time reads back exactly.
var regNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

var (
	leasesGVR       = coordinationv1.SchemeGroupVersion.WithResource("leases")
	nodesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	appsDeployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// localServing is a local discovery that has read this server's documents.
func localServing() *localDiscovery {
	l := newLocalDiscovery()
	api := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace},
		{Resource: "nodes", Scope: apidiscoveryv2.ScopeCluster},
	}}}}}
	apis := []apidiscoveryv2.APIGroupDiscovery{{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
		Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Scope: apidiscoveryv2.ScopeNamespace}},
	}}}}
	l.doc.Store(newLocalDoc(nil, api, apis, "", ""))
	return l
}

func newTestRegistrar(cs *fake.Clientset, served func() []peerlease.ServedResource) *registrar {
	return &registrar{
		leases:   cs.CoordinationV1().Leases(peerlease.Namespace),
		serverID: regID, endpoint: regEndpoint, version: "v1.37.2", served: served,
		retention: time.Hour, gcInterval: time.Hour,
		now: func() time.Time { return regNow },
	}
}

// runUntilShutdown runs the registration loop, lets it write the Lease once,
// then shuts it down gracefully and waits until it returned.
func runUntilShutdown(t *testing.T, cs *fake.Clientset, r *registrar) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.LeaseName(regID), metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registration lease was never written")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the registration loop did not return after shutdown")
	}
}

func verbs(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "leases" {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// On graceful shutdown the Lease is kept and says when the server left and
// what it served; nothing is deleted.
func TestRegistrationMarksDepartedInsteadOfDeleting(t *testing.T) {
	cs := fake.NewClientset()
	runUntilShutdown(t, cs, newTestRegistrar(cs, localServing().served))

	if v := verbs(cs); slices.Contains(v, "delete") {
		t.Fatalf("the lease was deleted on shutdown: %v", v)
	}
	l, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.LeaseName(regID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the registration lease is gone after shutdown: %v", err)
	}
	if got := l.Annotations[peerlease.DepartedAtAnnotation]; got != "2026-05-01T12:00:00Z" {
		t.Errorf("%s = %q", peerlease.DepartedAtAnnotation, got)
	}
	r, err := peerlease.ParseRegistration(l)
	if err != nil {
		t.Fatal(err)
	}
	want := []peerlease.ServedResource{
		{GroupVersionResource: nodesGVR, Scope: apidiscoveryv2.ScopeCluster},
		{GroupVersionResource: podsGVR, Scope: apidiscoveryv2.ScopeNamespace},
		{GroupVersionResource: appsDeployments, Scope: apidiscoveryv2.ScopeNamespace},
	}
	if !r.Departed() || !r.DepartedAt.Equal(regNow) || !reflect.DeepEqual(r.Served, want) || r.Endpoint != regEndpoint {
		t.Errorf("departed registration: %+v, served want %v", r, want)
	}

	// Back under the same ID: the first renewal drops the departure.
	back := newTestRegistrar(cs, localServing().served)
	back.renew(context.Background())
	l, err = cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.LeaseName(regID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{peerlease.DepartedAtAnnotation, peerlease.ServedResourcesAnnotation} {
		if _, ok := l.Annotations[a]; ok {
			t.Errorf("the renewal kept %s", a)
		}
	}
}

// The departure is recorded by the pre-shutdown hook, while the server
// still serves: from then on the renewal loop, still running until the
// listener closes, must not renew the departure away, and the loop's own
// record at its end is a no-op.
func TestRegistrationPreShutdownDepartureSticks(t *testing.T) {
	cs := fake.NewClientset()
	r := newTestRegistrar(cs, localServing().served)
	r.renew(context.Background())
	f := &Filter{}
	f.registrar.Store(r)
	if err := f.PreShutdownHook(); err != nil {
		t.Fatal(err)
	}
	r.renew(context.Background()) // a tick of the loop during the shutdown
	runUntilShutdown(t, cs, r)    // and its end
	l, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.LeaseName(regID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Annotations[peerlease.DepartedAtAnnotation]; !ok {
		t.Fatalf("the departure recorded at shutdown was renewed away: %v", l.Annotations)
	}
	if n := slices.Index(verbs(cs), "update"); n < 0 {
		t.Fatalf("no update: %v", verbs(cs))
	}
	// Without a post-start hook (the filter is off) the hook does nothing.
	if err := (&Filter{}).PreShutdownHook(); err != nil {
		t.Fatal(err)
	}
}

func TestRegistrationDepartureWithoutList(t *testing.T) {
	huge := func() []peerlease.ServedResource {
		var out []peerlease.ServedResource
		for i := 0; i < 20000; i++ {
			// Distinct enough not to compress below the cap.
			name := fmt.Sprintf("r%x", uint64(i)*0x9e3779b97f4a7c15)
			out = append(out, peerlease.ServedResource{GroupVersionResource: podsGVR.GroupVersion().WithResource(name), Scope: apidiscoveryv2.ScopeNamespace})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		served func() []peerlease.ServedResource
		seed   bool
	}{
		{"local discovery never read", newLocalDiscovery().served, true},
		{"list over the cap", huge, true},
		{"lease gone meanwhile: created departed", localServing().served, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			r := newTestRegistrar(cs, tc.served)
			if tc.seed {
				r.renew(context.Background())
			}
			if err := r.depart(context.Background()); err != nil {
				t.Fatal(err)
			}
			l, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.LeaseName(regID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := peerlease.ParseRegistration(l)
			if err != nil {
				t.Fatal(err)
			}
			if !reg.DepartedAt.Equal(regNow) {
				t.Errorf("departed at %s, want %s", reg.DepartedAt, regNow)
			}
			_, has := l.Annotations[peerlease.ServedResourcesAnnotation]
			if wantList := !tc.seed; has != wantList {
				t.Errorf("served-resources present=%v, want %v", has, wantList)
			}
			if n := len(l.Annotations[peerlease.ServedResourcesAnnotation]); n > peerlease.MaxServedEncodedBytes {
				t.Errorf("annotation of %d bytes", n)
			}
		})
	}
}

func regLeaseAt(id string, renewed time.Time, rv string) *coordinationv1.Lease {
	l := peerlease.NewRegistrationLease(nil, id, regEndpoint, "v1.37.2", renewed)
	l.ResourceVersion = rv
	l.UID = types.UID("uid-" + id)
	return l
}

// Collection deletes the Leases gone for longer than the retention, each
// only in the version it judged.
func TestRegistrationLeaseCollection(t *testing.T) {
	hour := time.Hour
	departedOld := peerlease.MarkDeparted(regLeaseAt("departed-2h", regNow.Add(-2*hour), "11"), regNow.Add(-2*hour), "")
	departedRecent := peerlease.MarkDeparted(regLeaseAt("departed-30m", regNow.Add(-30*time.Minute), "12"), regNow.Add(-30*time.Minute), "")
	// Renewed until 10 minutes ago, then departed with a time an hour
	// back (a skewed clock): gone since the departure.
	departedSkewed := peerlease.MarkDeparted(regLeaseAt("departed-skewed", regNow.Add(-10*time.Minute), "13"), regNow.Add(-90*time.Minute), "")
	lapsedOld := regLeaseAt("lapsed-2h", regNow.Add(-2*hour), "14")
	lapsedRecent := regLeaseAt("lapsed-50m", regNow.Add(-50*time.Minute), "15")
	live := regLeaseAt("live", regNow.Add(-time.Second), "16")
	renewedMeanwhile := regLeaseAt("renewed-meanwhile", regNow.Add(-3*hour), "17")
	// Not ours: another component's Lease in kube-system, long lapsed.
	foreign := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: peerlease.Namespace, ResourceVersion: "18"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("x"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(regNow.Add(-5 * hour))),
		},
	}
	cs := fake.NewClientset(departedOld, departedRecent, departedSkewed, lapsedOld, lapsedRecent, live, renewedMeanwhile, foreign)

	// The API server's preconditions, which the fake does not check; and
	// renewed-meanwhile's server renews it between the list and the delete.
	var preconditioned []string
	cs.PrependReactor("delete", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteActionImpl)
		if d.Name == peerlease.LeaseName("renewed-meanwhile") {
			renewed := peerlease.NewRegistrationLease(renewedMeanwhile, "renewed-meanwhile", regEndpoint, "v1.37.2", regNow)
			renewed.ResourceVersion = "19"
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
		preconditioned = append(preconditioned, strings.TrimPrefix(d.Name, peerlease.NamePrefix))
		if *p.ResourceVersion != cur.ResourceVersion || (p.UID != nil && *p.UID != cur.UID) {
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), d.Name, fmt.Errorf("precondition failed"))
		}
		return false, nil, nil // the tracker deletes it
	})

	r := newTestRegistrar(cs, nil)
	n, err := r.collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoordinationV1().Leases(peerlease.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, l := range list.Items {
		left = append(left, strings.TrimPrefix(l.Name, peerlease.NamePrefix))
	}
	sort.Strings(left)
	want := []string{"departed-30m", "kube-scheduler", "lapsed-50m", "live", "renewed-meanwhile"}
	if !slices.Equal(left, want) {
		t.Errorf("leases after collection: %v, want %v", left, want)
	}
	if n != 3 {
		t.Errorf("collect reported %d deletions, want 3 (departed-2h, departed-skewed, lapsed-2h)", n)
	}
	sort.Strings(preconditioned)
	if want := []string{"departed-2h", "departed-skewed", "lapsed-2h", "renewed-meanwhile"}; !slices.Equal(preconditioned, want) {
		t.Errorf("deletes tried: %v, want %v", preconditioned, want)
	}

	// A longer retention keeps everything.
	cs2 := fake.NewClientset(departedOld, lapsedOld)
	r2 := newTestRegistrar(cs2, nil)
	r2.retention = 3 * hour
	if n, err := r2.collect(context.Background()); err != nil || n != 0 {
		t.Errorf("collect with a 3h retention: %d, %v; want nothing deleted", n, err)
	}
}

func TestRegistrationOptionsDefaults(t *testing.T) {
	f, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.opts.RegistrationLeaseRetention != time.Hour || f.opts.RegistrationLeaseGCInterval != 5*time.Minute {
		t.Errorf("defaults: retention %s, interval %s", f.opts.RegistrationLeaseRetention, f.opts.RegistrationLeaseGCInterval)
	}
	f, err = New(Options{RegistrationLeaseRetention: 2 * time.Hour, RegistrationLeaseGCInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if f.opts.RegistrationLeaseRetention != 2*time.Hour || f.opts.RegistrationLeaseGCInterval != time.Minute {
		t.Errorf("set values not kept: %+v", f.opts)
	}
}
