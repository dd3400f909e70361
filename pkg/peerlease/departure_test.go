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
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func served(g, v, r string, scope apidiscoveryv2.ResourceScope) ServedResource {
	return ServedResource{GroupVersionResource: schema.GroupVersionResource{Group: g, Version: v, Resource: r}, Scope: scope}
}

const (
	ns = apidiscoveryv2.ScopeNamespace
	cl = apidiscoveryv2.ScopeCluster
)

// gz is base64 of gzip of text, as a hostile writer would make it.
func gz(t *testing.T, text string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestServedRoundTrip(t *testing.T) {
	in := []ServedResource{
		served("apps", "v1", "deployments", ns),
		served("", "v1", "pods", ns),
		served("", "v1", "nodes", cl),
		served("storagemigration.k8s.io", "v1beta1", "storageversionmigrations", cl),
		served("apps", "v1", "deployments", ns), // in /api and /apis, or twice: once
		served("stable.example.com", "v1", "crontabs", ns),
	}
	want := []ServedResource{
		served("", "v1", "nodes", cl),
		served("", "v1", "pods", ns),
		served("apps", "v1", "deployments", ns),
		served("stable.example.com", "v1", "crontabs", ns),
		served("storagemigration.k8s.io", "v1beta1", "storageversionmigrations", cl),
	}
	enc, err := EncodeServed(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeServed(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip = %v, want %v", got, want)
	}
	// The same set in any order encodes to the same bytes, so a rewrite of
	// an unchanged list is no change.
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		shuffled := append([]ServedResource(nil), in...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again, err := EncodeServed(shuffled)
		if err != nil || again != enc {
			t.Fatalf("order %v encodes differently: %v", shuffled, err)
		}
	}

	empty, err := EncodeServed(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeServed(empty); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty list round trip = %#v, %v; want an empty, non-nil list", got, err)
	}
}

func TestEncodeServedRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []ServedResource
		wantErr string
	}{
		{"no scope", []ServedResource{served("", "v1", "pods", "")}, "scope"},
		{"other scope", []ServedResource{served("", "v1", "pods", "Global")}, "scope"},
		{"slash in resource", []ServedResource{served("", "v1", "pods/log", ns)}, "URL path segment"},
		{"empty resource", []ServedResource{served("", "v1", "", ns)}, "URL path segment"},
		{"newline in resource", []ServedResource{served("", "v1", "po\nds", ns)}, "printable"},
		{"bad version", []ServedResource{served("", "V1", "pods", ns)}, "version"},
		{"bad group", []ServedResource{served("Apps", "v1", "deployments", ns)}, "group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := EncodeServed(tc.in); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("EncodeServed = %q, %v; want an error mentioning %q", s, err, tc.wantErr)
			}
		})
	}
	t.Run("over the cap", func(t *testing.T) {
		// Random names barely compress.
		r := rand.New(rand.NewSource(2))
		var big []ServedResource
		for i := 0; i < 8000; i++ {
			big = append(big, served("", "v1", fmt.Sprintf("r%016x%016x", r.Uint64(), r.Uint64()), ns))
		}
		if s, err := EncodeServed(big); err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("EncodeServed of %d random names = %d bytes, %v; want an error over %d bytes", len(big), len(s), err, MaxServedEncodedBytes)
		}
	})
}

func TestDecodeServedHostile(t *testing.T) {
	bomb := func() string {
		// 5 MiB of one byte gzips to a few KiB.
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(bytes.Repeat([]byte{'a'}, 5<<20))
		_ = zw.Close()
		return base64.StdEncoding.EncodeToString(buf.Bytes())
	}()
	truncated := func() string {
		enc, err := EncodeServed([]ServedResource{served("", "v1", "pods", ns)})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := base64.StdEncoding.DecodeString(enc)
		return base64.StdEncoding.EncodeToString(raw[:len(raw)-4]) // no length in the trailer
	}()
	for _, tc := range []struct {
		name, in, wantErr string
	}{
		{"not base64", "not base64!", "not base64"},
		{"base64 of plain text", base64.StdEncoding.EncodeToString([]byte("/v1/pods/Namespaced")), "not gzip"},
		{"truncated gzip", truncated, "not gzip"},
		{"gzip bomb", bomb, "more than"},
		{"too long", strings.Repeat("A", MaxServedEncodedBytes+4), "more than"},
		{"three fields", gz(t, "/v1/pods"), "not group/version/resource/scope"},
		{"five fields", gz(t, "/v1/pods/log/Namespaced"), "not group/version/resource/scope"},
		{"trailing newline", gz(t, "/v1/pods/Namespaced\n"), "line 2"},
		{"empty line", gz(t, "/v1/nodes/Cluster\n\n/v1/pods/Namespaced"), "line 2"},
		{"unsorted", gz(t, "/v1/pods/Namespaced\n/v1/nodes/Cluster"), "not sorted"},
		{"duplicate", gz(t, "/v1/pods/Cluster\n/v1/pods/Namespaced"), "listed twice"},
		{"bad scope", gz(t, "/v1/pods/Everywhere"), "scope"},
		{"bad group", gz(t, "Apps/v1/deployments/Namespaced"), "group"},
		{"empty version", gz(t, "//pods/Namespaced"), "version"},
		{"dot resource", gz(t, "/v1/../Namespaced"), "URL path segment"},
		{"control character", gz(t, "/v1/po\tds/Namespaced"), "printable"},
		{"too many", gz(t, strings.Repeat("x", 1)+strings.Repeat("\nx", MaxServedResources)), "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeServed(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("DecodeServed = %v, %v; want an error mentioning %q", got, err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("a rejected list gives nothing, got %v", got)
			}
		})
	}
}

func TestMarkDepartedRoundTrip(t *testing.T) {
	list := []ServedResource{served("", "v1", "pods", ns), served("apps", "v1", "deployments", ns)}
	enc, err := EncodeServed(list)
	if err != nil {
		t.Fatal(err)
	}
	live := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", t0)
	live.ResourceVersion = "7"
	at := t0.Add(5 * time.Second).In(time.FixedZone("CEST", 2*3600))
	departed := MarkDeparted(live, at, enc)
	if _, ok := live.Annotations[DepartedAtAnnotation]; ok {
		t.Fatal("MarkDeparted modified its input")
	}
	if got := departed.Annotations[DepartedAtAnnotation]; got != "2026-05-01T12:00:05Z" {
		t.Errorf("%s = %q, want RFC 3339 in UTC", DepartedAtAnnotation, got)
	}
	if departed.ResourceVersion != "7" || !departed.Spec.RenewTime.Time.Equal(t0) {
		t.Errorf("MarkDeparted changed more than the annotations: rv %s renew %s", departed.ResourceVersion, departed.Spec.RenewTime)
	}
	r, err := ParseRegistration(departed)
	if err != nil {
		t.Fatal(err)
	}
	wantAt := time.Date(2026, 5, 1, 12, 0, 5, 0, time.UTC)
	if !r.Departed() || !r.DepartedAt.Equal(wantAt) || !reflect.DeepEqual(r.Served, list) {
		t.Errorf("departed registration: at %s served %v", r.DepartedAt, r.Served)
	}
	// It no longer counts as live, though its renewal has not lapsed, and
	// it is gone since the departure.
	if now := t0.Add(6 * time.Second); r.Live(now) || !now.Before(r.Expires) || !r.GoneAt().Equal(wantAt) {
		t.Errorf("live=%v goneAt=%s, want false and %s", r.Live(now), r.GoneAt(), wantAt)
	}

	// Without a new list: the time, and the list already recorded stays.
	bare := MarkDeparted(departed, at, "")
	if r, err := ParseRegistration(bare); err != nil || !r.Departed() || !reflect.DeepEqual(r.Served, list) {
		t.Errorf("departed without a new list: %+v, %v", r, err)
	}

	// The server back under the same ID: renewal drops the departure and
	// keeps the list until the server records a new one.
	back := NewRegistrationLease(departed, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", t0.Add(5*time.Minute))
	if _, ok := back.Annotations[DepartedAtAnnotation]; ok {
		t.Errorf("renewal kept %s", DepartedAtAnnotation)
	}
	if r, err := ParseRegistration(back); err != nil || r.Departed() || !reflect.DeepEqual(r.Served, list) || !r.Live(t0.Add(5*time.Minute)) {
		t.Errorf("renewed after departure: %+v, %v", r, err)
	}
}

// TestServedRecordedWhileLive: what a server serves is in its Lease from
// its first renewal that knows it, replaced by each renewal that brings a
// new list, and still there when the Lease lapses (a crash writes no
// goodbye).
func TestServedRecordedWhileLive(t *testing.T) {
	v136 := []ServedResource{served("", "v1", "pods", ns)}
	v137 := []ServedResource{served("", "v1", "pods", ns), served("storagemigration.k8s.io", "v1beta1", "storageversionmigrations", cl)}
	enc := func(l []ServedResource) string {
		s, err := EncodeServed(l)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	parse := func(l *coordinationv1.Lease) Registration {
		r, err := ParseRegistration(l)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", "", t0)
	if r := parse(first); r.Served != nil {
		t.Errorf("a Lease written before the server read its discovery lists %v", r.Served)
	}
	second := NewRegistrationLease(first, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", enc(v136), t0.Add(3*time.Second))
	if r := parse(second); !reflect.DeepEqual(r.Served, v136) {
		t.Errorf("first list: %v", r.Served)
	}
	third := NewRegistrationLease(second, "kube-apiserver-a", "10.0.0.1:6443", "v1.37.2", enc(v137), t0.Add(6*time.Second))
	if r := parse(third); !reflect.DeepEqual(r.Served, v137) {
		t.Errorf("changed list: %v", r.Served)
	}
	// Lapsed: not live, gone at its expiry, the list still there.
	r := parse(third)
	if later := t0.Add(time.Minute); r.Live(later) || !r.GoneAt().Equal(t0.Add(6*time.Second+DefaultDurationSeconds*time.Second)) || !reflect.DeepEqual(r.Served, v137) {
		t.Errorf("lapsed: live=%v goneAt=%s served=%v", r.Live(later), r.GoneAt(), r.Served)
	}
}

func TestGoneAt(t *testing.T) {
	lease := func(departed string) Registration {
		l := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "", "", t0)
		if departed != "" {
			l.Annotations[DepartedAtAnnotation] = departed
		}
		r, err := ParseRegistration(l)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	expires := t0.Add(DefaultDurationSeconds * time.Second)
	for _, tc := range []struct {
		name, departed string
		want           time.Time
	}{
		{"running: its lapse", "", expires},
		{"departed before its lapse", "2026-05-01T12:00:05Z", t0.Add(5*time.Second - 123456*time.Microsecond)},
		{"departed after it lapsed: the lapse", "2026-05-01T13:00:00Z", expires},
		{"offset departure", "2026-05-01T14:00:05+02:00", t0.Add(5*time.Second - 123456*time.Microsecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := lease(tc.departed)
			if got := r.GoneAt(); !got.Equal(tc.want) {
				t.Errorf("GoneAt = %s, want %s", got, tc.want)
			}
			l := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "", "", t0)
			if tc.departed != "" {
				l.Annotations[DepartedAtAnnotation] = tc.departed
			}
			if got := GoneSince(l); !got.Equal(tc.want) {
				t.Errorf("GoneSince = %s, want %s", got, tc.want)
			}
		})
	}
	// A broken departure time: GoneSince still judges the lease by its lapse.
	l := NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "", "", t0)
	l.Annotations[DepartedAtAnnotation] = "yesterday"
	if got := GoneSince(l); !got.Equal(expires) {
		t.Errorf("GoneSince with a broken departure = %s, want %s", got, expires)
	}
}

func TestParseRegistrationBrokenDeparture(t *testing.T) {
	for _, tc := range []struct {
		name, annotation, value, wantErr string
	}{
		{"departed-at empty", DepartedAtAnnotation, "", DepartedAtAnnotation},
		{"departed-at not a time", DepartedAtAnnotation, "yesterday", "not an RFC 3339 time"},
		{"departed-at without zone", DepartedAtAnnotation, "2026-05-01T12:00:00", "not an RFC 3339 time"},
		{"departed-at zero", DepartedAtAnnotation, "0001-01-01T00:00:00Z", "zero time"},
		{"served not base64", ServedResourcesAnnotation, "%%%", ServedResourcesAnnotation + ": not base64"},
		{"served bad line", ServedResourcesAnnotation, gz(t, "pods"), ServedResourcesAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := MarkDeparted(NewRegistrationLease(nil, "kube-apiserver-a", "10.0.0.1:6443", "", "", t0), t0, "")
			l.Annotations[tc.annotation] = tc.value
			r, err := ParseRegistration(l)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "kube-system/peerdiscovery-kube-apiserver-a") {
				t.Fatalf("ParseRegistration = %+v, %v; want an error naming the lease and %q", r, err, tc.wantErr)
			}
			if !reflect.DeepEqual(r, Registration{}) {
				t.Errorf("a broken lease must give no registration, got %+v", r)
			}
		})
	}
}

func TestServedFromDiscovery(t *testing.T) {
	api := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "pods", Scope: ns, Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "log"}}},
		{Resource: "nodes", Scope: cl},
	}}}}}
	apis := []apidiscoveryv2.APIGroupDiscovery{{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{
		{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Scope: ns}}},
	}}}
	got := ServedFromDiscovery(api, apis)
	want := []ServedResource{served("", "v1", "pods", ns), served("", "v1", "nodes", cl), served("apps", "v1", "deployments", ns)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ServedFromDiscovery = %v, want %v", got, want)
	}
}

// TestServedRecordsKindsAndVerbs: the record carries each resource's kind
// and verbs (clients drop a discovery entry without a kind, and the
// namespace controller deletes only what lists "delete"); a kind or verbs
// that would not validate are left out of the entry, never the entry out
// of the record; a record in the older four-field form still decodes.
func TestServedRecordsKindsAndVerbs(t *testing.T) {
	api := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "configmaps", Scope: ns, ResponseKind: &metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Verbs: []string{"list", "delete", "get", "list"}},
		{Resource: "odd", Scope: ns, ResponseKind: &metav1.GroupVersionKind{Version: "v1", Kind: "Not/A-Kind"}, Verbs: []string{"GET"}},
	}}}}}
	got := ServedFromDiscovery(api)
	want := []ServedResource{
		{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Scope: ns, Kind: "ConfigMap", Verbs: []string{"delete", "get", "list"}},
		{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "odd"}, Scope: ns},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ServedFromDiscovery = %+v, want %+v", got, want)
	}
	enc, err := EncodeServed(got)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeServed(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip = %+v, want %+v", back, want)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte("/v1/configmaps/Namespaced\napps/v1/deployments/Namespaced"))
	_ = zw.Close()
	old, err := DecodeServed(base64.StdEncoding.EncodeToString(buf.Bytes()))
	if err != nil || len(old) != 2 || old[0].Kind != "" || old[1].Resource != "deployments" {
		t.Errorf("the four-field form: %+v, %v", old, err)
	}
}
