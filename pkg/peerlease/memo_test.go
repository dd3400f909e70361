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

package peerlease

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// manyServed is a record of n resources, as a server at scale writes it.
func manyServed(t *testing.T, n int, group string) string {
	t.Helper()
	rs := make([]ServedResource, 0, n)
	for i := range n {
		rs = append(rs, ServedResource{
			GroupVersionResource: schema.GroupVersionResource{Group: fmt.Sprintf("%s%d.example.com", group, i/100), Version: "v1", Resource: fmt.Sprintf("things%d", i%100)},
			Scope:                "Namespaced", Kind: "Thing", Verbs: []string{"get", "list", "watch"},
		})
	}
	enc, err := EncodeServed(rs)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// renewed is l renewed at at, as the informer delivers it: a new object
// whose annotation strings are copies.
func renewed(l *coordinationv1.Lease, at time.Time) *coordinationv1.Lease {
	out := NewRegistrationLease(l, *l.Spec.HolderIdentity, l.Annotations[EndpointAnnotation], l.Annotations[BinaryVersionAnnotation], strings.Clone(l.Annotations[ServedResourcesAnnotation]), at)
	return out
}

// TestServedMemo: a renewal that records the same list reuses the decoded
// list; a changed, broken, removed or forgotten record is read anew, and
// everything else of the Lease is read as ParseRegistration reads it.
func TestServedMemo(t *testing.T) {
	var m ServedMemo
	first := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", manyServed(t, 5000, "a"), t0)
	r1, err := m.ParseRegistration(first)
	if err != nil || len(r1.Served) != 5000 {
		t.Fatalf("first parse: %d resources, %v", len(r1.Served), err)
	}

	second := renewed(first, t0.Add(3*time.Second))
	r2, err := m.ParseRegistration(second)
	if err != nil {
		t.Fatal(err)
	}
	if &r2.Served[0] != &r1.Served[0] {
		t.Error("a renewal with the same record decoded the list again")
	}
	if want, _ := ParseRegistration(second); !r2.RenewTime.Equal(want.RenewTime) || !r2.Expires.Equal(want.Expires) || r2.ServerID != want.ServerID || r2.Endpoint != want.Endpoint || len(r2.Served) != len(want.Served) {
		t.Errorf("renewal parsed as %+v, ParseRegistration says %+v", r2, want)
	}
	// A renewal costs the Lease's few fields, not the list's thousands of
	// strings (ParseRegistration: one allocation or more per resource).
	if a := testing.AllocsPerRun(20, func() { _, _ = m.ParseRegistration(second) }); a > 50 {
		t.Errorf("a renewal with the same record allocated %.0f times", a)
	}

	changed := NewRegistrationLease(second, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", manyServed(t, 4000, "b"), t0.Add(6*time.Second))
	r3, err := m.ParseRegistration(changed)
	if err != nil || len(r3.Served) != 4000 || r3.Served[0].Group != "b0.example.com" {
		t.Fatalf("a changed record: %d resources (first %v), %v", len(r3.Served), r3.Served[0], err)
	}

	broken := changed.DeepCopy()
	broken.Annotations[ServedResourcesAnnotation] = "not base64!"
	if _, err := m.ParseRegistration(broken); err == nil {
		t.Error("a broken record after a good one parsed")
	}
	// The good record is still the one remembered.
	if r, err := m.ParseRegistration(renewed(changed, t0.Add(9*time.Second))); err != nil || &r.Served[0] != &r3.Served[0] {
		t.Errorf("after a broken revision: %v, reused %v", err, err == nil && &r.Served[0] == &r3.Served[0])
	}

	none := changed.DeepCopy()
	delete(none.Annotations, ServedResourcesAnnotation)
	if r, err := m.ParseRegistration(none); err != nil || r.Served != nil {
		t.Errorf("no record: %v, %d resources", err, len(r.Served))
	}

	m.Forget(changed.Namespace, changed.Name)
	if r, err := m.ParseRegistration(changed); err != nil || &r.Served[0] == &r3.Served[0] {
		t.Errorf("after Forget: %v, the list reused %v", err, err == nil && &r.Served[0] == &r3.Served[0])
	}
	m.Retain(func(string, string) bool { return false })
	if len(m.byLease) != 0 {
		t.Errorf("Retain kept %d leases", len(m.byLease))
	}

	// A Lease that is not a registration is an error, as ParseRegistration's.
	other := changed.DeepCopy()
	other.Name = "someone-else"
	if _, err := m.ParseRegistration(other); err == nil {
		t.Error("a Lease named for another holder parsed")
	}
}
