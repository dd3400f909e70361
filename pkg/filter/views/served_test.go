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
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// localServing is a local discovery that has read this server's documents.
func localServing() *Local {
	l := newLocal()
	api := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
		{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace},
		{Resource: "nodes", Scope: apidiscoveryv2.ScopeCluster},
	}}}}}
	apis := []apidiscoveryv2.APIGroupDiscovery{{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{
		Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Scope: apidiscoveryv2.ScopeNamespace}},
	}}}}
	l.SetDoc(NewLocalDoc(nil, api, apis, "", ""))
	return l
}

// servesGroup makes l's document list one more group, with one version.
func servesGroup(l *Local, group, version string, resources ...apidiscoveryv2.APIResourceDiscovery) {
	d := l.Current()
	apis := append(slices.Clone(d.APIs), apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group},
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: version, Resources: resources}}})
	l.SetDoc(NewLocalDoc(d, d.API, apis, "", ""))
}

// fakeMetadata is a synced metadata cache (CRDs, APIServices) holding the
// given names.
type fakeMetadata struct{ store cache.Store }

func newFakeMetadata(t *testing.T, names ...string) *fakeMetadata {
	s := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, n := range names {
		if err := s.Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeMetadata{store: s}
}

func (f *fakeMetadata) HasSynced() bool       { return true }
func (f *fakeMetadata) GetStore() cache.Store { return f.store }

// apiServiceObject is an APIService as the informer decodes it: with
// spec.service when it is aggregated.
func apiServiceObject(name string, aggregated bool) *unstructured.Unstructured {
	version, group, _ := strings.Cut(name, ".")
	spec := map[string]interface{}{"group": group, "version": version, "caBundle": "Y2E="}
	if aggregated {
		spec["service"] = map[string]interface{}{"namespace": "kube-system", "name": "metrics-server", "port": int64(443)}
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]interface{}{"name": name, "resourceVersion": "1"}, "spec": spec,
	}}
}

// newFakeAPIServices is a synced APIService cache holding the given
// APIServices (name: aggregated), stored as the informer's transform
// keeps them.
func newFakeAPIServices(t *testing.T, apiServices map[string]bool) *fakeMetadata {
	s := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for name, aggregated := range apiServices {
		kept, err := keepAPIServiceIdentity(apiServiceObject(name, aggregated))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(kept); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeMetadata{store: s}
}

// The record leaves out what CRDs serve: every server serves it, so it
// never decides a route, and thousands of CRDs would bloat each renewal.
func TestServedRecordLeavesOutCRDs(t *testing.T) {
	local := localServing()
	servesGroup(local, "stable.example.com", "v1", apidiscoveryv2.APIResourceDiscovery{Resource: "crontabs", Scope: apidiscoveryv2.ScopeNamespace})
	local.crds = newFakeMetadata(t, "crontabs.stable.example.com")
	got, err := peerlease.DecodeServed(local.ServedRecord(context.Background()).Served)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, servingWant) {
		t.Errorf("record %v, want %v (no CRD)", got, servingWant)
	}
}

// The record leaves out what aggregated APIServices (those with a
// service) serve, for the same reasons: every server serves them through
// its aggregator, and at the scale docs/operations.md states (4,000 of
// 5,000 extra GVRs were aggregated in test/bench) each renewal carried
// them all. The Local group-versions kube-aggregator registers for the
// server's own APIs (no service) stay.
func TestServedRecordLeavesOutAggregatedAPIs(t *testing.T) {
	local := localServing()
	servesGroup(local, "metrics.k8s.io", "v1beta1", apidiscoveryv2.APIResourceDiscovery{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace}, apidiscoveryv2.APIResourceDiscovery{Resource: "nodes", Scope: apidiscoveryv2.ScopeCluster})
	local.crds = newFakeMetadata(t)
	// As the informer stores them.
	local.apiServices = newFakeAPIServices(t, map[string]bool{"v1beta1.metrics.k8s.io": true, "v1.apps": false})
	got, err := peerlease.DecodeServed(local.ServedRecord(context.Background()).Served)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, servingWant) {
		t.Errorf("record %v, want %v (no aggregated API)", got, servingWant)
	}
}

// What the record's list leaves out still changes the record: it carries
// the ETags of the documents it comes from, so that peerdiscovery reads the
// server when an aggregated API's resources change under an unchanged
// APIService, rather than at its safety poll. A document read without
// both ETags records none.
func TestServedRecordCarriesTheDocumentsETags(t *testing.T) {
	local := localServing()
	local.crds = newFakeMetadata(t)
	local.apiServices = newFakeAPIServices(t, map[string]bool{"v1beta1.metrics.k8s.io": true})
	pods := apidiscoveryv2.APIResourceDiscovery{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace}
	nodes := apidiscoveryv2.APIResourceDiscovery{Resource: "nodes", Scope: apidiscoveryv2.ScopeCluster}
	read := func(apiETag, apisETag string, metrics ...apidiscoveryv2.APIResourceDiscovery) peerlease.ServedContent {
		t.Helper()
		d := local.Current()
		apis := append(slices.Clone(localServing().Current().APIs), apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: "metrics.k8s.io"},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1beta1", Resources: metrics}}})
		local.SetDoc(NewLocalDoc(d, d.API, apis, apiETag, apisETag))
		return local.ServedRecord(context.Background())
	}
	before := read(`"api-1"`, `"apis-1"`, pods)
	if before.ETags != (peerlease.DiscoveryETags{API: `"api-1"`, APIs: `"apis-1"`}) {
		t.Errorf("ETags %+v", before.ETags)
	}
	after := read(`"api-1"`, `"apis-2"`, pods, nodes)
	if after.Served != before.Served || after.ETags.APIs != `"apis-2"` {
		t.Errorf("the aggregated API's new resource: list changed %v, ETags %+v; want the same list under the new ETags", after.Served != before.Served, after.ETags)
	}
	if got := read(`"api-1"`, "", pods); !got.ETags.IsZero() || got.Served != before.Served {
		t.Errorf("a document without an ETag: ETags %+v", got.ETags)
	}
}

// An APIService's spec can change while the local document does not: the
// record follows the APIService, not only the document.
func TestServedRecordFollowsAPIServiceMetadata(t *testing.T) {
	local := localServing()
	servesGroup(local, "metrics.k8s.io", "v1beta1", apidiscoveryv2.APIResourceDiscovery{Resource: "pods", Scope: apidiscoveryv2.ScopeNamespace})
	local.crds = newFakeMetadata(t)
	apiServices := newFakeAPIServices(t, map[string]bool{"v1beta1.metrics.k8s.io": true})
	local.apiServices = apiServices
	record := func() []peerlease.ServedResource {
		t.Helper()
		got, err := peerlease.DecodeServed(local.ServedRecord(context.Background()).Served)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := record(); !reflect.DeepEqual(got, servingWant) {
		t.Fatalf("record %v, want %v (no aggregated API)", got, servingWant)
	}
	// Now Local (no service): the server serves it itself.
	kept, err := keepAPIServiceIdentity(apiServiceObject("v1beta1.metrics.k8s.io", false))
	if err != nil {
		t.Fatal(err)
	}
	if err := apiServices.store.Update(kept); err != nil {
		t.Fatal(err)
	}
	local.metadataChanged()
	metrics := schema.GroupVersionResource{Group: "metrics.k8s.io", Version: "v1beta1", Resource: "pods"}
	if got := record(); !slices.ContainsFunc(got, func(r peerlease.ServedResource) bool { return r.GroupVersionResource == metrics }) {
		t.Errorf("after the service was removed the record is still %v", got)
	}
}
