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

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// t0 has no sub-microsecond part: MicroTime keeps microseconds.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)

func TestLeaseName(t *testing.T) {
	if got := LeaseName("kube-apiserver-a"); got != "peerdiscovery-kube-apiserver-a" {
		t.Fatalf("LeaseName = %q", got)
	}
}

func TestNewRegistrationLeaseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, id, endpoint, wantEndpoint, version string
	}{
		{"ipv4", "kube-apiserver-a", "10.0.0.1:6443", "10.0.0.1:6443", "v1.37.2"},
		{"ipv6", "kube-apiserver-b", "[fd00::1]:6443", "[fd00::1]:6443", "v1.36.3"},
		{"ipv6 normalised", "kube-apiserver-b", "[fd00:0::0001]:6443", "[fd00::1]:6443", "v1.36.3"},
		{"dns", "apiserver.example.com", "apiserver.example.com:443", "apiserver.example.com:443", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewRegistrationLease(nil, tc.id, tc.endpoint, tc.version, "", t0)
			if l.Namespace != Namespace || l.Name != LeaseName(tc.id) {
				t.Fatalf("lease at %s/%s", l.Namespace, l.Name)
			}
			if !IsRegistration(l) || IsIdentity(l) {
				t.Fatalf("IsRegistration=%v IsIdentity=%v", IsRegistration(l), IsIdentity(l))
			}
			r, err := ParseRegistration(l)
			if err != nil {
				t.Fatalf("ParseRegistration: %v", err)
			}
			want := Registration{
				ServerID: tc.id, Endpoint: tc.wantEndpoint, BinaryVersion: tc.version,
				RenewTime: t0, Expires: t0.Add(DefaultDurationSeconds * time.Second),
			}
			if !r.RenewTime.Equal(want.RenewTime) || !r.Expires.Equal(want.Expires) {
				t.Errorf("times: renew %s expires %s, want %s %s", r.RenewTime, r.Expires, want.RenewTime, want.Expires)
			}
			if !r.AcquireTime.Equal(t0) || r.Departed() || r.Served != nil {
				t.Errorf("acquire %s departed %s served %v, want %s, none, none", r.AcquireTime, r.DepartedAt, r.Served, t0)
			}
			r.AcquireTime, r.RenewTime, r.Expires, want.RenewTime, want.Expires = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("ParseRegistration = %+v, want %+v", r, want)
			}
		})
	}
}

func TestNewRegistrationLeaseRenew(t *testing.T) {
	first := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.36.3", "", t0)
	first.Labels["team"] = "control-plane"
	first.Annotations["note"] = "kept"
	first.ResourceVersion = "42"
	later := t0.Add(3 * time.Second)
	renewed := NewRegistrationLease(first, "kube-apiserver-a", "10.0.0.2:6443", "v1.37.2", "", later)

	if renewed == first {
		t.Fatal("renewal must not modify the existing lease in place")
	}
	if first.Annotations[EndpointAnnotation] != "10.0.0.1:6443" || !first.Spec.RenewTime.Time.Equal(t0) {
		t.Fatal("the existing lease was modified")
	}
	if renewed.ResourceVersion != "42" || renewed.Labels["team"] != "control-plane" || renewed.Annotations["note"] != "kept" {
		t.Errorf("renewal dropped metadata: %+v", renewed.ObjectMeta)
	}
	if !renewed.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("acquireTime = %s, want the first acquisition %s", renewed.Spec.AcquireTime.Time, t0)
	}
	if !renewed.Spec.RenewTime.Time.Equal(later) {
		t.Errorf("renewTime = %s, want %s", renewed.Spec.RenewTime.Time, later)
	}
	r, err := ParseRegistration(renewed)
	if err != nil {
		t.Fatal(err)
	}
	if r.Endpoint != "10.0.0.2:6443" || r.BinaryVersion != "v1.37.2" || !r.Expires.Equal(later.Add(DefaultDurationSeconds*time.Second)) {
		t.Errorf("renewed registration = %+v", r)
	}
}

// A server back after a departure or a lapse holds its Lease anew: its
// acquireTime is the return, so it outranks identities that claimed its
// endpoint meanwhile.
func TestNewRegistrationLeaseRejoinIsANewHolding(t *testing.T) {
	first := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", t0)
	back := t0.Add(time.Hour)
	if l := NewRegistrationLease(first, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", back); !l.Spec.AcquireTime.Time.Equal(back) {
		t.Errorf("after a lapse: acquireTime %s, want %s", l.Spec.AcquireTime.Time, back)
	}
	gone := first.DeepCopy()
	gone.Annotations[DepartedAtAnnotation] = t0.Add(time.Second).UTC().Format(time.RFC3339)
	soon := t0.Add(2 * time.Second)
	if l := NewRegistrationLease(gone, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", soon); !l.Spec.AcquireTime.Time.Equal(soon) {
		t.Errorf("after a departure: acquireTime %s, want %s", l.Spec.AcquireTime.Time, soon)
	}
}

func TestParseRegistrationBroken(t *testing.T) {
	good := func() *coordinationv1.Lease {
		return NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", t0)
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*coordinationv1.Lease)
		wantErr string
	}{
		{"no label", func(l *coordinationv1.Lease) { delete(l.Labels, RegistrationLabel) }, "not a registration lease"},
		{"other component", func(l *coordinationv1.Lease) { l.Labels[RegistrationLabel] = "scheduler" }, "not a registration lease"},
		{"other namespace", func(l *coordinationv1.Lease) { l.Namespace = "default" }, "not a registration lease"},
		{"no holder", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, "no holderIdentity"},
		{"empty holder", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }, "no holderIdentity"},
		{"invalid holder", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To("Kube_APIServer")
			l.Name = LeaseName("Kube_APIServer")
		}, "holderIdentity"},
		{"name mismatch", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("kube-apiserver-b") }, "name does not match"},
		{"no endpoint", func(l *coordinationv1.Lease) { delete(l.Annotations, EndpointAnnotation) }, EndpointAnnotation},
		{"endpoint without port", func(l *coordinationv1.Lease) { l.Annotations[EndpointAnnotation] = "10.0.0.1" }, "not host:port"},
		{"bad host", func(l *coordinationv1.Lease) { l.Annotations[EndpointAnnotation] = "bad_host:6443" }, "neither an IP nor a DNS name"},
		{"port 0", func(l *coordinationv1.Lease) { l.Annotations[EndpointAnnotation] = "10.0.0.1:0" }, "port must be"},
		{"port too large", func(l *coordinationv1.Lease) { l.Annotations[EndpointAnnotation] = "10.0.0.1:65536" }, "port must be"},
		{"port not a number", func(l *coordinationv1.Lease) { l.Annotations[EndpointAnnotation] = "10.0.0.1:https" }, "port must be"},
		{"unbracketed ipv6", func(l *coordinationv1.Lease) { l.Annotations[EndpointAnnotation] = "fd00::1:6443" }, "not host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := good()
			tc.mutate(l)
			r, err := ParseRegistration(l)
			if err == nil {
				t.Fatalf("ParseRegistration accepted a broken lease: %+v", r)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
			if !reflect.DeepEqual(r, Registration{}) {
				t.Errorf("a broken lease must give no registration, got %+v", r)
			}
		})
	}
}

func TestValidateEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" = error
	}{
		{"10.0.0.1:6443", "10.0.0.1:6443"},
		{"10.0.0.1:1", "10.0.0.1:1"},
		{"10.0.0.1:65535", "10.0.0.1:65535"},
		{"10.0.0.1:06443", "10.0.0.1:6443"},
		{"[fd00::1]:6443", "[fd00::1]:6443"},
		{"[FD00:0:0::1]:6443", "[fd00::1]:6443"},
		{"[::ffff:10.0.0.1]:6443", "10.0.0.1:6443"},
		{"kubernetes.default.svc:443", "kubernetes.default.svc:443"},
		{"localhost:443", "localhost:443"},
		{"", ""},
		{":6443", ""},
		{"10.0.0.1", ""},
		{"10.0.0.1:", ""},
		{"10.0.0.1:0", ""},
		{"10.0.0.1:-1", ""},
		{"10.0.0.1:+443", ""},
		{"10.0.0.1:65536", ""},
		{"10.0.0.1:https", ""},
		{"fd00::1", ""},
		{"[fd00::1%eth0]:6443", ""},
		{"Upper.Case:443", ""},
		{"under_score:443", ""},
		{"https://10.0.0.1:6443", ""},
		{"10.0.0.1:6443/path", ""},
	} {
		got, err := ValidateEndpoint(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ValidateEndpoint(%q) = %q, want an error", tc.in, got)
		case tc.want != "" && err != nil:
			t.Errorf("ValidateEndpoint(%q): %v", tc.in, err)
		case got != tc.want:
			t.Errorf("ValidateEndpoint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLapse(t *testing.T) {
	created := t0.Add(-time.Hour)
	acquired := t0.Add(-time.Minute)
	for _, tc := range []struct {
		name        string
		renew       *time.Time
		acquire     *time.Time
		duration    *int32
		staleAfter  time.Duration
		wantRenew   time.Time
		wantExpires time.Time
	}{
		{"renew time and duration", &t0, &acquired, ptr.To[int32](30), 0, t0, t0.Add(30 * time.Second)},
		{"no duration: default", &t0, nil, nil, 0, t0, t0.Add(DefaultDurationSeconds * time.Second)},
		{"zero duration: default", &t0, nil, ptr.To[int32](0), 0, t0, t0.Add(DefaultDurationSeconds * time.Second)},
		{"negative duration: default", &t0, nil, ptr.To[int32](-5), 0, t0, t0.Add(DefaultDurationSeconds * time.Second)},
		{"no renew: acquire time", nil, &acquired, ptr.To[int32](30), 0, acquired, acquired.Add(30 * time.Second)},
		{"neither: creation time", nil, nil, ptr.To[int32](30), 0, created, created.Add(30 * time.Second)},
		{"staleAfter shorter wins", &t0, nil, ptr.To[int32](3600), 45 * time.Second, t0, t0.Add(45 * time.Second)},
		{"staleAfter longer ignored", &t0, nil, ptr.To[int32](30), time.Hour, t0, t0.Add(30 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
			if tc.renew != nil {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*tc.renew))
			}
			if tc.acquire != nil {
				l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(*tc.acquire))
			}
			l.Spec.LeaseDurationSeconds = tc.duration
			renew, expires := lapse(l, tc.staleAfter)
			if !renew.Equal(tc.wantRenew) || !expires.Equal(tc.wantExpires) {
				t.Errorf("lapse = %s, %s; want %s, %s", renew, expires, tc.wantRenew, tc.wantExpires)
			}
		})
	}
}

func identityLease(name string, annotations map[string]string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: Namespace,
			Labels:      map[string]string{IdentityLabel: IdentityComponent},
			Annotations: annotations,
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(name + "_6c0a9d4e-2f8b-4f8e-9b6a-0d5d7f3c2a11"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime:            ptr.To(metav1.NewMicroTime(renew)),
		},
	}
}

func TestParseIdentity(t *testing.T) {
	addr := map[string]string{PeerAdvertiseAddressAnnotation: "10.0.0.7:6443"}
	for _, tc := range []struct {
		name        string
		lease       *coordinationv1.Lease
		staleAfter  time.Duration
		want        Registration
		wantErr     string
		wantNotIden bool
	}{
		{
			name: "stale after 45s", lease: identityLease("apiserver-abc", addr, t0), staleAfter: 45 * time.Second,
			want: Registration{ServerID: "apiserver-abc", Endpoint: "10.0.0.7:6443", RenewTime: t0, Expires: t0.Add(45 * time.Second)},
		},
		{
			name: "no staleAfter: the hour-long lease duration", lease: identityLease("apiserver-abc", addr, t0),
			want: Registration{ServerID: "apiserver-abc", Endpoint: "10.0.0.7:6443", RenewTime: t0, Expires: t0.Add(time.Hour)},
		},
		{
			name: "ipv6 address", staleAfter: 45 * time.Second,
			lease: identityLease("apiserver-v6", map[string]string{PeerAdvertiseAddressAnnotation: "[fd00::7]:6443"}, t0),
			want:  Registration{ServerID: "apiserver-v6", Endpoint: "[fd00::7]:6443", RenewTime: t0, Expires: t0.Add(45 * time.Second)},
		},
		{name: "gate off: no annotation", lease: identityLease("apiserver-abc", nil, t0), wantErr: "no " + PeerAdvertiseAddressAnnotation},
		{
			name:    "bad address",
			lease:   identityLease("apiserver-abc", map[string]string{PeerAdvertiseAddressAnnotation: "10.0.0.7"}, t0),
			wantErr: "not host:port",
		},
		{
			name: "not an identity lease", wantErr: "not an identity lease", wantNotIden: true,
			lease: func() *coordinationv1.Lease {
				l := identityLease("apiserver-abc", addr, t0)
				l.Labels[IdentityLabel] = "kube-controller-manager"
				return l
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if IsIdentity(tc.lease) == tc.wantNotIden {
				t.Fatalf("IsIdentity = %v", IsIdentity(tc.lease))
			}
			if IsRegistration(tc.lease) {
				t.Fatal("an identity lease is not a registration lease")
			}
			got, err := ParseIdentity(tc.lease, tc.staleAfter)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ServerID != tc.want.ServerID || got.Endpoint != tc.want.Endpoint || got.BinaryVersion != "" ||
				!got.RenewTime.Equal(tc.want.RenewTime) || !got.Expires.Equal(tc.want.Expires) {
				t.Errorf("ParseIdentity = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// An identity lease is never read as a registration and vice versa.
func TestParseWrongKind(t *testing.T) {
	reg := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", t0)
	if _, err := ParseIdentity(reg, time.Minute); err == nil {
		t.Error("ParseIdentity accepted a registration lease")
	}
	id := identityLease("apiserver-abc", map[string]string{PeerAdvertiseAddressAnnotation: "10.0.0.7:6443"}, t0)
	if _, err := ParseRegistration(id); err == nil {
		t.Error("ParseRegistration accepted an identity lease")
	}
}
