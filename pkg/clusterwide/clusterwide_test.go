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

package clusterwide

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRule(t *testing.T) {
	crontabs := CRD{Group: "stable.example.com", Plural: "crontabs", Served: []string{"v1"}}
	for _, tc := range []struct {
		name        string
		crd         *CRD
		apiService  *APIService
		gvr         schema.GroupVersionResource
		wantSource  string
		clusterWide bool
	}{
		{"nothing: a built-in API", nil, nil, gvr("apps", "v1", "deployments"), "", false},
		{"a CRD's served version", &crontabs, nil, gvr("stable.example.com", "v1", "crontabs"), SourceCRD, true},
		{"a CRD's version it does not serve", &crontabs, nil, gvr("stable.example.com", "v2", "crontabs"), "", false},
		{"a CRD read from its metadata: the listed version counts as served",
			&CRD{Group: "stable.example.com", Plural: "crontabs"}, nil, gvr("stable.example.com", "v2", "crontabs"), SourceCRD, true},
		{"a CRD serving no version", &CRD{Group: "stable.example.com", Plural: "crontabs", Served: []string{}}, nil,
			gvr("stable.example.com", "v1", "crontabs"), "", false},
		{"an APIService with a service", nil, &APIService{Group: "metrics.k8s.io", Version: "v1beta1", Service: true},
			gvr("metrics.k8s.io", "v1beta1", "pods"), SourceAPIService, true},
		{"a Local APIService (kube-aggregator's own, labelled automanaged)", nil, &APIService{Group: "apps", Version: "v1"},
			gvr("apps", "v1", "deployments"), "", false},
		{"a Local APIService made by hand (no label): served by the server itself", nil, &APIService{Group: "example.com", Version: "v1alpha1"},
			gvr("example.com", "v1alpha1", "things"), "", false},
		{"a CRD's group-version with its Local APIService (crd-autoregistration)", &crontabs, &APIService{Group: "stable.example.com", Version: "v1"},
			gvr("stable.example.com", "v1", "crontabs"), SourceCRD, true},
		{"a CRD's group-version an APIService proxies: the APIService wins", &crontabs,
			&APIService{Group: "stable.example.com", Version: "v1", Service: true}, gvr("stable.example.com", "v1", "crontabs"), SourceAPIService, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, ok := Resource(tc.gvr, tc.crd, tc.apiService)
			if src != tc.wantSource || ok != tc.clusterWide {
				t.Errorf("Resource(%v) = %q, %v; want %q, %v", tc.gvr, src, ok, tc.wantSource, tc.clusterWide)
			}
			// GroupVersions answers the same of every object whose served
			// versions are known.
			if tc.crd != nil && tc.crd.Served == nil {
				return
			}
			var crds []CRD
			var apiServices []APIService
			if tc.crd != nil {
				crds = append(crds, *tc.crd)
			}
			if tc.apiService != nil {
				apiServices = append(apiServices, *tc.apiService)
			}
			got, ok := GroupVersions(crds, apiServices)[tc.gvr.GroupVersion()]
			if got != tc.wantSource || ok != tc.clusterWide {
				t.Errorf("GroupVersions[%v] = %q, %v; want %q, %v", tc.gvr.GroupVersion(), got, ok, tc.wantSource, tc.clusterWide)
			}
		})
	}
}

func TestGroupVersions(t *testing.T) {
	got := GroupVersions(
		[]CRD{
			{Group: "stable.example.com", Plural: "crontabs", Served: []string{"v1", "v2"}},
			{Group: "stable.example.com", Plural: "widgets", Served: []string{"v1"}},
			{Group: "other.example.com", Plural: "gizmos", Served: []string{"v1beta1"}},
		},
		[]APIService{
			{Group: "metrics.k8s.io", Version: "v1beta1", Service: true},
			{Group: "apps", Version: "v1"},
			{Group: "stable.example.com", Version: "v1"},
		},
	)
	want := map[schema.GroupVersion]string{
		{Group: "stable.example.com", Version: "v1"}:     SourceCRD,
		{Group: "stable.example.com", Version: "v2"}:     SourceCRD,
		{Group: "other.example.com", Version: "v1beta1"}: SourceCRD,
		{Group: "metrics.k8s.io", Version: "v1beta1"}:    SourceAPIService,
	}
	if !maps.Equal(got, want) {
		t.Errorf("GroupVersions = %v, want %v", got, want)
	}
}

func TestNames(t *testing.T) {
	if n := CRDName(schema.GroupResource{Group: "stable.example.com", Resource: "crontabs"}); n != "crontabs.stable.example.com" {
		t.Errorf("CRDName = %q", n)
	}
	if n := APIServiceName(schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}); n != "v1beta1.metrics.k8s.io" {
		t.Errorf("APIServiceName = %q", n)
	}
	for name, want := range map[string]*CRD{
		"crontabs.stable.example.com": {Group: "stable.example.com", Plural: "crontabs"},
		"nodot":                       nil,
		".example.com":                nil,
		"crontabs.":                   nil,
	} {
		got, ok := CRDFromName(name)
		if want == nil {
			if ok {
				t.Errorf("CRDFromName(%q) = %+v, want none", name, got)
			}
			continue
		}
		if !ok || got.Group != want.Group || got.Plural != want.Plural || got.Served != nil {
			t.Errorf("CRDFromName(%q) = %+v, %v; want %+v", name, got, ok, *want)
		}
	}
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}
