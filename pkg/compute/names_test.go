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

package compute

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

func TestRouteName(t *testing.T) {
	for _, tc := range []struct {
		gvr  schema.GroupVersionResource
		want string // "hash" = a hashed name
	}{
		{gvr("", "v1", "pods"), "pods.v1.core"},
		{gvr("apps", "v1", "deployments"), "deployments.v1.apps"},
		{gvr("stable.example.com", "v1beta1", "crontabs"), "crontabs.v1beta1.stable.example.com"},
		{gvr("x-y.io", "v2alpha1", "a-b"), "a-b.v2alpha1.x-y.io"},
		// Not valid object names, or ambiguous: hashed.
		{gvr("apps", "v1", "Deployments"), "hash"},
		{gvr("apps", "v1", "under_score"), "hash"},
		{gvr("apps", "v1", "dotted.name"), "hash"},
		{gvr("apps", "v1", "-leading"), "hash"},
		{gvr("apps", "v1", "trailing-"), "hash"},
		{gvr("core", "v1", "pods"), "hash"}, // would collide with the legacy pods.v1.core
		{gvr(strings.Repeat("g", 63)+"."+strings.Repeat("h", 63)+"."+strings.Repeat("i", 63)+"."+strings.Repeat("j", 50), "v1", "widget"), "widget.v1." + strings.Repeat("g", 63) + "." + strings.Repeat("h", 63) + "." + strings.Repeat("i", 63) + "." + strings.Repeat("j", 50)},
		{gvr(strings.Repeat("g", 63)+"."+strings.Repeat("h", 63)+"."+strings.Repeat("i", 63)+"."+strings.Repeat("j", 50), "v1", "widgetsxx"), "hash"},
	} {
		got := RouteName(tc.gvr)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("RouteName(%v) = %q is not a valid name: %v", tc.gvr, got, errs)
		}
		switch {
		case tc.want == "hash":
			if !strings.HasPrefix(got, "gvr-") || len(got) != 36 || strings.Contains(got, ".") {
				t.Errorf("RouteName(%v) = %q, want a hashed name", tc.gvr, got)
			}
		case got != tc.want:
			t.Errorf("RouteName(%v) = %q, want %q", tc.gvr, got, tc.want)
		}
	}
	// Dotted resources would otherwise collide across GVRs.
	a, b := RouteName(gvr("v1.g", "b", "a")), RouteName(gvr("g", "v1", "a.b"))
	if a == b {
		t.Errorf("%q for two GVRs", a)
	}
	if RouteName(gvr("", "v1", "pods")) == RouteName(gvr("core", "v1", "pods")) {
		t.Error("group core collides with the legacy group")
	}
}

// Peers' documents may carry such names (Validate admits any URL path
// segment as a resource), and Compute still names every route validly.
func TestComputeUnnamableGVRs(t *testing.T) {
	apis := docs(grp("core", ver("v1", res("pods"))), grp("apps", ver("v1", res("Deployments"), res("a.b"))))
	if err := merge.Validate(apis); err != nil {
		t.Fatalf("merge.Validate rejects the document: %v", err)
	}
	out, err := Compute(Input{Peers: []Peer{readyPeer("a", coreDoc, apis)}})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range out.Routes {
		if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 || names[r.Name] {
			t.Errorf("route %q for %+v: invalid or repeated", r.Name, r.Spec)
		}
		names[r.Name] = true
	}
	if len(out.Routes) != 6 { // pods configmaps nodes (legacy), pods (group core), Deployments, a.b
		t.Errorf("%d routes, want 6", len(out.Routes))
	}
	if rt := routeByName(out, "pods.v1.core"); rt == nil || rt.Spec.Group != "" {
		t.Errorf("the legacy pods route is not pods.v1.core: %+v", rt)
	}
}

func TestPeerName(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"kube-apiserver-a", "kube-apiserver-a"},
		{"apiserver-6bnt3svmhcsxqo2yqhjzgguoaq", "apiserver-6bnt3svmhcsxqo2yqhjzgguoaq"},
		{"10.0.0.1:6443", "10.0.0.1-6443"},
		{"[fd00::1]:6443", "fd00--1-6443"},
		{"[FD00::1]:6443", "fd00--1-6443"},
		{"host_1", "host-1"},
		{"[::ffff:a00:1]:6443", "hash"}, // "--ffff-..." starts with a dash
		{"", "hash"},
	} {
		got := PeerName(tc.id)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("PeerName(%q) = %q is not a valid name: %v", tc.id, got, errs)
		}
		if tc.want == "hash" {
			if !strings.HasPrefix(got, "peer-") || len(got) != 37 {
				t.Errorf("PeerName(%q) = %q, want a hashed name", tc.id, got)
			}
		} else if got != tc.want {
			t.Errorf("PeerName(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

func TestIsDNSSubdomainMatchesValidation(t *testing.T) {
	for _, s := range []string{
		"", "a", "-", "a-", "-a", "a.b", "a..b", ".a", "a.", "a-.b", "a.-b", "A", "a_b", "0", "0.0", "a--b",
		strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("a", 64), "a.b-c.d", "é",
	} {
		if got, want := isDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0; got != want {
			t.Errorf("isDNSSubdomain(%q) = %v, validation says %v", s, got, want)
		}
	}
}
