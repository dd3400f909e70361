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

// Package clusterwide owns one rule: which group-versions every
// kube-apiserver serves alike, whatever its binary version, so that no
// request for them is ever routed to a peer. The engine flags their
// routing tables (status.clusterWide) from every CRD and APIService; the
// filter leaves their resources out of the served record of its
// registration Lease. It is pure, and the filter imports it, so it must
// compile against the k8s.io libraries of every supported release
// (hack/verify-filter-builds.sh).
//
// The rule: a group-version is cluster-wide when
//   - a CustomResourceDefinition serves it (a served entry of
//     spec.versions): every server's apiextensions-apiserver serves the
//     same CRDs from the same etcd; or
//   - an APIService with spec.service serves it: every server's
//     kube-aggregator proxies it to that one service.
//
// An APIService without spec.service ("Local") is served by the server
// itself: its built-in APIs, which depend on its version (routing exists
// for them), or a CRD's group-version (covered above). So it is not
// cluster-wide, whatever its labels: kube-aggregator's automanaged label,
// which the filter once read instead, says who created the object, not
// where its requests go, and a Local APIService created by hand has none.
package clusterwide

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Sources of a cluster-wide group-version, as PeerRoutingTable
// status.clusterWideSource names them.
const (
	SourceCRD        = "CustomResourceDefinition"
	SourceAPIService = "APIService"
)

// CRD is what the rule reads of a CustomResourceDefinition.
type CRD struct {
	// Group and Plural are spec.group and spec.names.plural; the CRD is
	// named <plural>.<group> (CRDName).
	Group, Plural string
	// Served are the names of spec.versions with served: true. Nil when
	// only the CRD's metadata was read (the filter's informer): every
	// version then counts as served, because such a reader asks only about
	// a version its own discovery lists, and discovery lists a CRD's served
	// versions only.
	Served []string
}

// Serves tells whether c serves version.
func (c CRD) Serves(version string) bool {
	return c.Served == nil || slices.Contains(c.Served, version)
}

// APIService is what the rule reads of an APIService.
type APIService struct {
	// Group and Version are spec.group and spec.version; the APIService
	// is named <version>.<group> (APIServiceName).
	Group, Version string
	// Service tells whether spec.service is set: kube-aggregator proxies
	// the group-version to it.
	Service bool
}

// ClusterWide tells whether a serves its group-version alike on every
// server: only through a service.
func (a APIService) ClusterWide() bool { return a.Service }

// GroupVersions is every cluster-wide group-version of crds and
// apiServices, with its source. An APIService's source wins over a CRD's
// for the same group-version: kube-aggregator proxies it before the CRD
// handler would see the request. Enumerating needs each CRD's served
// versions: one read from its metadata only (Served nil) lists none.
func GroupVersions(crds []CRD, apiServices []APIService) map[schema.GroupVersion]string {
	out := map[schema.GroupVersion]string{}
	for _, c := range crds {
		for _, v := range c.Served {
			out[schema.GroupVersion{Group: c.Group, Version: v}] = SourceCRD
		}
	}
	for _, a := range apiServices {
		if a.ClusterWide() {
			out[schema.GroupVersion{Group: a.Group, Version: a.Version}] = SourceAPIService
		}
	}
	return out
}

// Resource tells whether gvr is cluster-wide, and its source, given the
// CRD named CRDName(gvr.GroupResource()) and the APIService named
// APIServiceName(gvr.GroupVersion()), each nil when there is none: the
// same rule as GroupVersions, asked of one resource by a reader that
// looks objects up by name.
func Resource(gvr schema.GroupVersionResource, crd *CRD, apiService *APIService) (string, bool) {
	switch {
	case apiService != nil && apiService.ClusterWide():
		return SourceAPIService, true
	case crd != nil && crd.Serves(gvr.Version):
		return SourceCRD, true
	}
	return "", false
}

// CRDName is the name of the CRD that would serve gr.
func CRDName(gr schema.GroupResource) string { return gr.Resource + "." + gr.Group }

// APIServiceName is the name of the APIService of gv.
func APIServiceName(gv schema.GroupVersion) string { return gv.Version + "." + gv.Group }

// CRDFromName is what a CRD's name says of it (<plural>.<group>; a plural
// has no dot), for a reader of its metadata only: Served stays nil.
func CRDFromName(name string) (CRD, bool) {
	plural, group, ok := strings.Cut(name, ".")
	if !ok || plural == "" || group == "" {
		return CRD{}, false
	}
	return CRD{Group: group, Plural: plural}, true
}
