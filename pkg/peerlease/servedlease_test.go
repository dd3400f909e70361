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
	"reflect"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestServedLeaseRoundTrip(t *testing.T) {
	rs := []ServedResource{{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Scope: apidiscoveryv2.ScopeNamespace, Kind: "Pod", Verbs: []string{"get", "list"}}}
	enc, err := EncodeServed(rs)
	if err != nil {
		t.Fatal(err)
	}
	l := NewServedLease(nil, "kube-apiserver-a", ServedContent{Served: enc})
	if l.Name != "peerdiscovery.served-kube-apiserver-a" || l.Namespace != Namespace || l.Spec.RenewTime != nil || l.Spec.LeaseDurationSeconds != nil {
		t.Errorf("served-record Lease %s/%s renew %v duration %v: want peerdiscovery.served-kube-apiserver-a in %s, never renewed", l.Namespace, l.Name, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds, Namespace)
	}
	if !IsServedRecord(l) || IsRegistration(l) {
		t.Errorf("IsServedRecord %v, IsRegistration %v", IsServedRecord(l), IsRegistration(l))
	}
	rec, err := ParseServedRecord(l)
	if err != nil || rec.ServerID != "kube-apiserver-a" || !reflect.DeepEqual(rec.Served, rs) {
		t.Fatalf("ParseServedRecord: %+v, %v", rec, err)
	}
	// An update keeps what others set, and replaces the record.
	l.Labels["team"] = "a"
	upd := NewServedLease(l, "kube-apiserver-a", ServedContent{Served: ""})
	if upd.Labels["team"] != "a" || upd.Annotations[ServedResourcesAnnotation] != "" {
		t.Errorf("update: labels %v, record %q", upd.Labels, upd.Annotations[ServedResourcesAnnotation])
	}
	// One selector reads both kinds, and no other Lease.
	sel, err := labels.Parse(ComponentSelector)
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", time.Now())
	if !sel.Matches(labels.Set(l.Labels)) || !sel.Matches(labels.Set(reg.Labels)) || sel.Matches(labels.Set{IdentityLabel: IdentityComponent}) {
		t.Errorf("selector %q does not select exactly the registration and served-record Leases", ComponentSelector)
	}
	// No registration Lease name is a served-record Lease name.
	if LeaseName("served-kube-apiserver-a") == ServedLeaseName("kube-apiserver-a") {
		t.Error("a server ID makes a registration Lease name equal to another server's served-record Lease name")
	}
}

func TestParseServedRecordRejects(t *testing.T) {
	enc, err := EncodeServed(nil)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *coordinationv1.Lease {
		return NewServedLease(nil, "kube-apiserver-a", ServedContent{Served: enc})
	}
	for _, tc := range []struct {
		name  string
		edit  func(*coordinationv1.Lease)
		error string
	}{
		{"a registration Lease", func(l *coordinationv1.Lease) { l.Labels[RegistrationLabel] = RegistrationComponent }, "not a served-record lease"},
		{"another namespace", func(l *coordinationv1.Lease) { l.Namespace = "default" }, "not a served-record lease"},
		{"no holder", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, "no holderIdentity"},
		{"a holder that is no server ID", func(l *coordinationv1.Lease) { h := "Not_An_ID"; l.Spec.HolderIdentity = &h }, "holderIdentity"},
		{"another server's name", func(l *coordinationv1.Lease) { l.Name = ServedLeaseName("kube-apiserver-b") }, "name does not match"},
		{"no record", func(l *coordinationv1.Lease) { delete(l.Annotations, ServedResourcesAnnotation) }, "no annotation"},
		{"a broken record", func(l *coordinationv1.Lease) { l.Annotations[ServedResourcesAnnotation] = "not base64" }, "not base64"},
		{"one ETag", func(l *coordinationv1.Lease) { l.Annotations[DiscoveryETagsAnnotation] = `"a"` }, "want two ETags"},
		{"an empty ETag", func(l *coordinationv1.Lease) { l.Annotations[DiscoveryETagsAnnotation] = `"a" ` }, "an ETag of 0 bytes"},
		{"a third ETag", func(l *coordinationv1.Lease) { l.Annotations[DiscoveryETagsAnnotation] = `"a" "b" "c"` }, "byte 0x20"},
		{"an ETag too long", func(l *coordinationv1.Lease) {
			l.Annotations[DiscoveryETagsAnnotation] = `"a" "` + strings.Repeat("f", maxETagBytes) + `"`
		}, "an ETag of 258 bytes"},
		{"a control byte", func(l *coordinationv1.Lease) { l.Annotations[DiscoveryETagsAnnotation] = "\"a\" \"b\n\"" }, "byte 0xa"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := good()
			tc.edit(l)
			if _, err := ParseServedRecord(l); err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Errorf("error %v, want one with %q", err, tc.error)
			}
			var m ServedMemo
			if _, err := m.ParseServedRecord(l); err == nil {
				t.Error("the memo accepted it")
			}
		})
	}
}

// A record's discovery ETags go with it, and a Lease holds a content only
// with the same ETags (or none on both sides).
func TestServedLeaseCarriesDiscoveryETags(t *testing.T) {
	enc, err := EncodeServed(nil)
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver's ETags are a quoted SHA-512 in hex.
	sha512 := `"` + strings.Repeat("4D7E1BED90B364BC", 8) + `"`
	tagged := ServedContent{Served: enc, ETags: DiscoveryETags{API: sha512, APIs: `"3c4d"`}}
	l := NewServedLease(nil, "kube-apiserver-a", tagged)
	if got := l.Annotations[DiscoveryETagsAnnotation]; got != sha512+` "3c4d"` {
		t.Errorf("annotation %q", got)
	}
	var m ServedMemo
	for _, parse := range []func(*coordinationv1.Lease) (ServedRecord, error){ParseServedRecord, m.ParseServedRecord, m.ParseServedRecord} {
		if rec, err := parse(l); err != nil || rec.ETags != tagged.ETags {
			t.Fatalf("parsed ETags %+v, %v; want %+v", rec.ETags, err, tagged.ETags)
		}
	}
	untagged := ServedContent{Served: enc}
	moved := ServedContent{Served: enc, ETags: DiscoveryETags{API: sha512, APIs: `"5e6f"`}}
	if !tagged.Holds(l) || untagged.Holds(l) || moved.Holds(l) {
		t.Errorf("Holds: tagged %v, untagged %v, moved %v; want only tagged", tagged.Holds(l), untagged.Holds(l), moved.Holds(l))
	}
	// New ETags under the same list: the memo, which keeps the decoded
	// list, returns them.
	l = NewServedLease(l, "kube-apiserver-a", moved)
	if rec, err := m.ParseServedRecord(l); err != nil || rec.ETags != moved.ETags {
		t.Errorf("the memo's ETags after a change: %+v, %v", rec.ETags, err)
	}
	// A record written without ETags drops those written before.
	l = NewServedLease(l, "kube-apiserver-a", untagged)
	if _, ok := l.Annotations[DiscoveryETagsAnnotation]; ok || !untagged.Holds(l) {
		t.Errorf("an untagged record kept the annotation %q", l.Annotations[DiscoveryETagsAnnotation])
	}
	if rec, err := ParseServedRecord(l); err != nil || !rec.ETags.IsZero() {
		t.Errorf("an untagged record parsed to ETags %+v, %v", rec.ETags, err)
	}
}

// The memo decodes a served record once per content.
func TestServedMemoParsesAServedRecordOnce(t *testing.T) {
	rs := make([]ServedResource, 0, 1000)
	for i := range 1000 {
		rs = append(rs, ServedResource{GroupVersionResource: schema.GroupVersionResource{Group: "g.example.com", Version: "v1", Resource: "r" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)}, Scope: apidiscoveryv2.ScopeNamespace})
	}
	enc, err := EncodeServed(rs)
	if err != nil {
		t.Fatal(err)
	}
	l := NewServedLease(nil, "kube-apiserver-a", ServedContent{Served: enc})
	var m ServedMemo
	first, err := m.ParseServedRecord(l)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := m.ParseServedRecord(l)
	if len(first.Served) != len(rs) || &first.Served[0] != &again.Served[0] {
		t.Error("the memo decoded an unchanged record again")
	}
	if a := testing.AllocsPerRun(10, func() { _, _ = m.ParseServedRecord(l) }); a > 10 {
		t.Errorf("an unchanged record cost %.0f allocations", a)
	}
}
