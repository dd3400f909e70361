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
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
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
func localServing() *views.Local {
	l := newLocal()
	api := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace},
		{Resource: "nodes", Scope: apidiscoveryv2.ScopeCluster},
	}}}}}
	apis := []apidiscoveryv2.APIGroupDiscovery{{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
		Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Scope: apidiscoveryv2.ScopeNamespace}},
	}}}}
	l.SetDoc(views.NewLocalDoc(nil, api, apis, "", ""))
	return l
}

// servesGroup makes l's document list one more group, with one version.
func servesGroup(l *views.Local, group, version string, resources ...apidiscoveryv2.APIResourceDiscovery) {
	d := l.Current()
	apis := append(slices.Clone(d.APIs), apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group},
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: version, Resources: resources}}})
	l.SetDoc(views.NewLocalDoc(d, d.API, apis, "", ""))
}

// newLocal is a local discovery that has read nothing yet.
func newLocal() *views.Local { return views.New(views.Config{Now: time.Now}).Local }

// servingWant is what localServing records.
var servingWant = []peerlease.ServedResource{
	{GroupVersionResource: nodesGVR, Scope: apidiscoveryv2.ScopeCluster},
	{GroupVersionResource: podsGVR, Scope: apidiscoveryv2.ScopeNamespace},
	{GroupVersionResource: appsDeployments, Scope: apidiscoveryv2.ScopeNamespace},
}

func newTestRegistrar(cs *fake.Clientset, served func(context.Context) peerlease.ServedContent) *registrar {
	return &registrar{
		leases:   cs.CoordinationV1().Leases(peerlease.Namespace),
		serverID: regID, endpoint: regEndpoint, version: "v1.37.2", served: served,
		retention: DefaultRegistrationLeaseRetention, maxRetention: DefaultRegistrationLeaseMaxRetention, gcInterval: time.Hour,
		clock: clocktesting.NewFakeClock(regNow),
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

func getRegistration(t *testing.T, cs *fake.Clientset) (*coordinationv1.Lease, peerlease.Registration) {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.LeaseName(regID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := peerlease.ParseRegistration(l)
	if err != nil {
		t.Fatal(err)
	}
	return l, r
}

// getServed reads the served-record Lease: its record, and whether there
// is one.
func getServed(t *testing.T, cs *fake.Clientset) ([]peerlease.ServedResource, bool) {
	t.Helper()
	rec, ok := getServedRecord(t, cs)
	return rec.Served, ok
}

func getServedRecord(t *testing.T, cs *fake.Clientset) (peerlease.ServedRecord, bool) {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(peerlease.Namespace).Get(context.Background(), peerlease.ServedLeaseName(regID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return peerlease.ServedRecord{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := peerlease.ParseServedRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	return rec, true
}

// checkRenewalCarriesNoRecord: the registration Lease, renewed every 5 s,
// carries liveness only.
func checkRenewalCarriesNoRecord(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	if l, _ := getRegistration(t, cs); l.Annotations[peerlease.ServedResourcesAnnotation] != "" {
		t.Errorf("the registration Lease carries a served record of %d bytes", len(l.Annotations[peerlease.ServedResourcesAnnotation]))
	}
}

// What the server serves is in its served-record Lease from the first
// renewal after it read its own discovery, written before that renewal and
// again only when it changes: a crash (no goodbye) leaves it behind for
// every replica to read, and a renewal carries nothing else.
func TestRegistrationRecordsServedWhileRunning(t *testing.T) {
	cs := fake.NewClientset()
	local := newLocal()
	r := newTestRegistrar(cs, local.ServedRecord)
	r.renew(context.Background())
	if served, ok := getServed(t, cs); ok {
		t.Errorf("a record written before the first read: %v", served)
	}
	serving := localServing()
	local.SetDoc(serving.Current())
	cs.ClearActions()
	r.renew(context.Background())
	v := verbs(cs)
	if served, _ := getServed(t, cs); !reflect.DeepEqual(served, servingWant) {
		t.Errorf("after the first read: %v, want %v", served, servingWant)
	}
	// The record is written before the renewal that follows it.
	if !slices.Equal(v, []string{"get", "create", "update"}) {
		t.Errorf("the renewal after the first read: %v, want the record read and created, then the renewal", v)
	}
	checkRenewalCarriesNoRecord(t, cs)
	// Unchanged: a renewal writes the registration Lease only.
	cs.ClearActions()
	r.renew(context.Background())
	if v := verbs(cs); !slices.Equal(v, []string{"update"}) {
		t.Errorf("a renewal with the record unchanged: %v, want one update", v)
	}
	// A new API (here a new group) is recorded before the next renewal.
	servesGroup(local, "storagemigration.k8s.io", "v1beta1", apidiscoveryv2.APIResourceDiscovery{Resource: "storageversionmigrations", Scope: apidiscoveryv2.ScopeCluster})
	r.renew(context.Background())
	served, _ := getServed(t, cs)
	svm := schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1beta1", Resource: "storageversionmigrations"}
	if !slices.ContainsFunc(served, func(s peerlease.ServedResource) bool { return s.GroupVersionResource == svm }) || len(served) != len(servingWant)+1 {
		t.Errorf("after a new API: %v", served)
	}
	checkRenewalCarriesNoRecord(t, cs)
}

// New discovery ETags under the same list (what the list leaves out
// changed: an aggregated API's or a CRD's resources) write the record
// again before the next renewal, so that peerdiscovery reads the server at
// once; unchanged ETags write nothing.
func TestRegistrationRecordsNewDiscoveryETags(t *testing.T) {
	cs := fake.NewClientset()
	local := localServing()
	setETags := func(api, apis string) {
		d := local.Current()
		local.SetDoc(views.NewLocalDoc(d, d.API, d.APIs, api, apis))
	}
	setETags(`"api-1"`, `"apis-1"`)
	r := newTestRegistrar(cs, local.ServedRecord)
	ctx := context.Background()
	r.renew(ctx)
	if rec, _ := getServedRecord(t, cs); rec.ETags != (peerlease.DiscoveryETags{API: `"api-1"`, APIs: `"apis-1"`}) || !reflect.DeepEqual(rec.Served, servingWant) {
		t.Errorf("record %+v", rec)
	}
	setETags(`"api-1"`, `"apis-1"`) // read again, a 304
	cs.ClearActions()
	r.renew(ctx)
	if v := verbs(cs); !slices.Equal(v, []string{"update"}) {
		t.Errorf("a renewal with the same ETags: %v, want the renewal only", v)
	}
	setETags(`"api-1"`, `"apis-2"`)
	cs.ClearActions()
	r.renew(ctx)
	if v := verbs(cs); !slices.Equal(v, []string{"get", "update", "update"}) {
		t.Errorf("a renewal after new ETags: %v, want the record read and written, then the renewal", v)
	}
	if rec, _ := getServedRecord(t, cs); rec.ETags.APIs != `"apis-2"` || !reflect.DeepEqual(rec.Served, servingWant) {
		t.Errorf("record after new ETags %+v", rec)
	}
	checkRenewalCarriesNoRecord(t, cs)
}

// A served-record Lease deleted by someone else (an admin) is written
// again within servedRecheck, by a GET a minute while nothing changes.
func TestRegistrationRewritesADeletedServedRecord(t *testing.T) {
	cs := fake.NewClientset()
	r := newTestRegistrar(cs, localServing().ServedRecord)
	ctx := context.Background()
	r.renew(ctx)
	if err := cs.CoordinationV1().Leases(peerlease.Namespace).Delete(ctx, peerlease.ServedLeaseName(regID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	r.renew(ctx)
	if v := verbs(cs); !slices.Equal(v, []string{"update"}) {
		t.Errorf("a renewal within the recheck: %v, want the renewal only", v)
	}
	r.clock.(*clocktesting.FakeClock).Step(servedRecheck)
	r.renew(ctx)
	if served, _ := getServed(t, cs); !reflect.DeepEqual(served, servingWant) {
		t.Errorf("after the recheck: %v, want %v", served, servingWant)
	}
	// Unchanged and present: the recheck reads, and writes nothing.
	r.clock.(*clocktesting.FakeClock).Step(servedRecheck)
	cs.ClearActions()
	r.renew(ctx)
	if v := verbs(cs); !slices.Equal(v, []string{"get", "update"}) {
		t.Errorf("a recheck with the record in place: %v, want a read and the renewal", v)
	}
}

// A registration Lease that still carries its record (written by a filter
// from before the served-record Lease) loses it at the first renewal,
// once the served-record Lease holds it; a restart whose record is not
// known yet leaves the served-record Lease as it was.
func TestRegistrationMovesAnInlineRecord(t *testing.T) {
	enc, err := peerlease.EncodeServed(servingWant)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(peerlease.NewRegistrationLease(nil, regID, regEndpoint, "v1.36.3", enc, regNow.Add(-time.Minute)))
	newTestRegistrar(cs, newLocal().ServedRecord).renew(context.Background())
	if _, reg := getRegistration(t, cs); !reflect.DeepEqual(reg.Served, servingWant) {
		t.Errorf("a restart before its first read dropped the inline record: %v", reg.Served)
	}
	newTestRegistrar(cs, localServing().ServedRecord).renew(context.Background())
	if served, _ := getServed(t, cs); !reflect.DeepEqual(served, servingWant) {
		t.Errorf("served-record Lease %v, want %v", served, servingWant)
	}
	checkRenewalCarriesNoRecord(t, cs)
	// Restarted again, before its first read: the record stays.
	newTestRegistrar(cs, newLocal().ServedRecord).renew(context.Background())
	if served, _ := getServed(t, cs); !reflect.DeepEqual(served, servingWant) {
		t.Errorf("after a restart: %v", served)
	}
}

// A renewal writes from what the previous one wrote: one request, not a
// read and a write. A Lease changed by someone else meanwhile (a conflict)
// or deleted is read again and renewed; nothing is lost either way.
// On graceful shutdown the Lease is kept and says when the server left and
// what it served; nothing is deleted.
func TestRegistrationMarksDepartedInsteadOfDeleting(t *testing.T) {
	cs := fake.NewClientset()
	runUntilShutdown(t, cs, newTestRegistrar(cs, localServing().ServedRecord))

	if v := verbs(cs); slices.Contains(v, "delete") {
		t.Fatalf("the lease was deleted on shutdown: %v", v)
	}
	l, r := getRegistration(t, cs)
	if got := l.Annotations[peerlease.DepartedAtAnnotation]; got != "2026-05-01T12:00:00Z" {
		t.Errorf("%s = %q", peerlease.DepartedAtAnnotation, got)
	}
	if !r.Departed() || !r.DepartedAt.Equal(regNow) || r.Endpoint != regEndpoint {
		t.Errorf("departed registration: %+v", r)
	}
	if served, _ := getServed(t, cs); !reflect.DeepEqual(served, servingWant) {
		t.Errorf("served record after the departure: %v, want %v", served, servingWant)
	}

	// Back under the same ID: the first renewal drops the departure, and
	// records what it serves now.
	back := newTestRegistrar(cs, localServing().ServedRecord)
	back.renew(context.Background())
	l, r = getRegistration(t, cs)
	if _, ok := l.Annotations[peerlease.DepartedAtAnnotation]; ok {
		t.Errorf("the renewal kept %s", peerlease.DepartedAtAnnotation)
	}
	if served, _ := getServed(t, cs); !reflect.DeepEqual(served, servingWant) {
		t.Errorf("served after the renewal: %v", served)
	}
}

// The departure is recorded by the pre-shutdown hook, while the server
// still serves: from then on the renewal loop, still running until the
// listener closes, must not renew the departure away, and the loop's own
// record at its end is a no-op.
func TestRegistrationPreShutdownDepartureSticks(t *testing.T) {
	cs := fake.NewClientset()
	r := newTestRegistrar(cs, localServing().ServedRecord)
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
	huge := func() *views.Local {
		var rs []apidiscoveryv2.APIResourceDiscovery
		for i := 0; i < 20000; i++ {
			// Distinct enough not to compress below the cap.
			rs = append(rs, apidiscoveryv2.APIResourceDiscovery{Resource: fmt.Sprintf("r%x", uint64(i)*0x9e3779b97f4a7c15), Scope: apidiscoveryv2.ScopeNamespace})
		}
		l := newLocal()
		l.SetDoc(views.NewLocalDoc(nil, []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: rs}}}}, nil, "", ""))
		return l
	}
	for _, tc := range []struct {
		name   string
		local  *views.Local
		seed   bool
		noList bool
	}{
		{"local discovery never read", newLocal(), true, true},
		{"list over the cap", huge(), true, true},
		{"lease gone meanwhile: created departed", localServing(), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			r := newTestRegistrar(cs, tc.local.ServedRecord)
			if tc.seed {
				r.renew(context.Background())
			}
			if err := r.depart(context.Background()); err != nil {
				t.Fatal(err)
			}
			l, reg := getRegistration(t, cs)
			if !reg.DepartedAt.Equal(regNow) {
				t.Errorf("departed at %s, want %s", reg.DepartedAt, regNow)
			}
			if _, has := getServed(t, cs); has == tc.noList {
				t.Errorf("served record present=%v, want %v", has, !tc.noList)
			}
			if _, has := l.Annotations[peerlease.ServedResourcesAnnotation]; has {
				t.Errorf("the registration Lease carries a served record")
			}
		})
	}
}

func TestRegistrationOptionsDefaults(t *testing.T) {
	f, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.opts.RegistrationLeaseRetention != 10*time.Minute || f.opts.RegistrationLeaseMaxRetention != time.Hour || f.opts.RegistrationLeaseGCInterval != time.Minute {
		t.Errorf("defaults: retention %s, max %s, interval %s", f.opts.RegistrationLeaseRetention, f.opts.RegistrationLeaseMaxRetention, f.opts.RegistrationLeaseGCInterval)
	}
	f, err = New(Options{RegistrationLeaseRetention: 2 * time.Hour, RegistrationLeaseGCInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if f.opts.RegistrationLeaseRetention != 2*time.Hour || f.opts.RegistrationLeaseGCInterval != time.Minute {
		t.Errorf("set values not kept: %+v", f.opts)
	}
}
