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
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// TestLeaseRenewalKeepsTheDecodedRecord: every server renews its Lease
// every 5 s, and every filter reads each renewal; the record in it (5,000
// resources at the scale docs/operations.md states) is decoded only when
// it changed.
func TestLeaseRenewalKeepsTheDecodedRecord(t *testing.T) {
	rs := make([]peerlease.ServedResource, 0, 5000)
	for i := range 5000 {
		rs = append(rs, peerlease.ServedResource{
			GroupVersionResource: schema.GroupVersionResource{Group: fmt.Sprintf("g%d.example.com", i/100), Version: "v1", Resource: fmt.Sprintf("things%d", i%100)},
			Scope:                "Namespaced", Kind: "Thing", Verbs: []string{"get", "list"},
		})
	}
	enc, err := peerlease.EncodeServed(rs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l := newLeases(func() time.Time { return now })
	logger := klog.Background()
	lease := peerlease.NewRegistrationLease(nil, "kube-apiserver-b", "10.0.0.9:6443", "v1.37.2", enc, now)
	l.Record(logger, lease)
	gvr := schema.GroupVersionResource{Group: "g49.example.com", Version: "v1", Resource: "things99"}
	if r := l.Records()["kube-apiserver-b"]; r == nil || !r.Served.Serves(gvr) {
		t.Fatalf("the record of kube-apiserver-b lacks %v", gvr)
	}
	decoded := l.Records()["kube-apiserver-b"].Served
	renewal := peerlease.NewRegistrationLease(lease, "kube-apiserver-b", "10.0.0.9:6443", "v1.37.2", strings.Clone(enc), now.Add(3*time.Second))
	// ParseRegistration alone allocates more than once per resource.
	a := testing.AllocsPerRun(10, func() { l.Record(logger, renewal) })
	t.Logf("a renewal with the same record: %.0f allocations", a)
	if a > 100 {
		t.Errorf("a renewal with the same record cost %.0f allocations", a)
	}
	if r := l.Records()["kube-apiserver-b"]; r == nil || r.Served != decoded || !r.RenewTime.Equal(now.Add(3*time.Second)) {
		t.Errorf("after the renewal: %+v, want the record decoded before, renewed", r)
	}
}

// TestLeasesJoinTheServedRecord: a server's record comes from its
// served-record Lease, whichever of the two Leases is read first, wins
// over a record its registration Lease still carries, and goes with it;
// its server's Lease alone says nothing of what it serves.
func TestLeasesJoinTheServedRecord(t *testing.T) {
	gvr := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "x.example.com", Version: "v1", Resource: r}
	}
	enc := func(rs ...string) string {
		var list []peerlease.ServedResource
		for _, r := range rs {
			list = append(list, peerlease.ServedResource{GroupVersionResource: gvr(r), Scope: "Namespaced", Kind: "Thing", Verbs: []string{"get"}})
		}
		s, err := peerlease.EncodeServed(list)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now()
	l := newLeases(func() time.Time { return now })
	logger := klog.Background()
	const id = "kube-apiserver-b"
	serves := func(r string) bool {
		rec := l.Records()[id]
		return rec != nil && rec.Served.Serves(gvr(r))
	}
	servedLease := peerlease.NewServedLease(nil, id, peerlease.ServedContent{Served: enc("new")})
	l.Record(logger, servedLease) // read before its registration
	if _, ok := l.Records()[id]; ok {
		t.Fatal("a served record alone made a record of its server")
	}
	reg := peerlease.NewRegistrationLease(nil, id, "10.0.0.9:6443", "v1.37.2", "", now)
	l.Record(logger, reg)
	if !serves("new") {
		t.Fatalf("the registration read after its served record: %+v", l.Records()[id])
	}
	// A registration Lease that still carries an older record: the
	// served-record Lease wins.
	l.Record(logger, peerlease.NewRegistrationLease(reg, id, "10.0.0.9:6443", "v1.37.2", enc("old"), now))
	if !serves("new") || serves("old") {
		t.Errorf("the inline record won over the served-record Lease: %+v", l.Records()[id])
	}
	// The record changes: the next read of its Lease only.
	l.Record(logger, peerlease.NewServedLease(servedLease, id, peerlease.ServedContent{Served: enc("newer")}))
	if !serves("newer") || serves("new") {
		t.Errorf("after the record changed: %+v", l.Records()[id])
	}
	// The served-record Lease deleted: the inline record is all there is.
	l.Forget(servedLease)
	if !serves("old") || serves("newer") {
		t.Errorf("after the served-record Lease was deleted: %+v", l.Records()[id])
	}
	// A broken served-record Lease records nothing.
	broken := peerlease.NewServedLease(nil, id, peerlease.ServedContent{Served: "not base64"})
	l.Record(logger, broken)
	if !serves("old") {
		t.Errorf("a broken served-record Lease changed the record: %+v", l.Records()[id])
	}
	// The registration Lease deleted: no record of the server.
	l.Forget(reg)
	if _, ok := l.Records()[id]; ok {
		t.Error("a deleted registration Lease left its record")
	}
}
