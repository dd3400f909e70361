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

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/clusterwide"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// The served record: what this server's registration Lease records it
// serves, from the local view (local.go) less what every server serves
// alike (pkg/clusterwide).

// servedRecord is peerlease.EncodeServed of what one local document lists,
// for the registration Lease.
type servedRecord struct {
	generation, metadataChanges   uint64
	crdsSynced, apiServicesSynced bool
	content                       peerlease.ServedContent
}

// ServedRecord is what this server serves itself, encoded for its
// served-record Lease (peerlease.EncodeServed), with the ETags of the
// documents it comes from; zero before the first read or when it cannot
// be encoded. Resources of CustomResourceDefinitions and of aggregated
// APIServices are left out: every server serves them (they are never
// routed to a peer), and at thousands of them they would make the record
// large; a change of theirs shows in the ETags. Encoded once per document.
func (l *Local) ServedRecord(ctx context.Context) peerlease.ServedContent {
	d := l.doc.Load()
	if d == nil {
		return peerlease.ServedContent{}
	}
	// Read before the caches: an event meanwhile makes the next call encode
	// again.
	changes := l.metadataChanges.Load()
	crdsSynced := l.crds != nil && l.crds.HasSynced()
	apiServicesSynced := l.apiServices != nil && l.apiServices.HasSynced()
	if r := l.record.Load(); r != nil && r.generation == d.Generation && r.metadataChanges == changes &&
		r.crdsSynced == crdsSynced && r.apiServicesSynced == apiServicesSynced {
		return r.content
	}
	apis := d.APIs
	if apiServicesSynced {
		apis = l.withoutAggregated(apis)
	}
	var list []peerlease.ServedResource
	for _, r := range peerlease.ServedFromDiscovery(d.API, apis) {
		if r.Group != "" && crdsSynced && l.isCRD(r.GroupVersionResource) {
			continue
		}
		list = append(list, r)
	}
	enc, err := peerlease.EncodeServed(list)
	if err != nil {
		// Peers' replicas then route this server's APIs from what they
		// read of it; one that never did has no tombstone for it.
		klog.FromContext(ctx).Info("peerdiscovery filter: not recording the served resources in the served-record lease", "err", err)
	}
	content := peerlease.ServedContent{Served: enc}
	if enc != "" && d.APIETag != "" && d.APIsETag != "" {
		content.ETags = peerlease.DiscoveryETags{API: d.APIETag, APIs: d.APIsETag}
	}
	l.record.Store(&servedRecord{generation: d.Generation, metadataChanges: changes, crdsSynced: crdsSynced, apiServicesSynced: apiServicesSynced, content: content})
	return content
}

// withoutAggregated is groups without the group-versions that aggregated
// APIServices serve, left out before the resources are listed: at
// thousands of them, listing each resource only to drop it was most of
// what encoding the record cost, and an APIService's every status update
// encodes it again.
func (l *Local) withoutAggregated(groups []apidiscoveryv2.APIGroupDiscovery) []apidiscoveryv2.APIGroupDiscovery {
	out := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(groups))
	for _, g := range groups {
		var versions []apidiscoveryv2.APIVersionDiscovery
		for _, v := range g.Versions {
			if !l.isAggregated(schema.GroupVersion{Group: g.Name, Version: v.Version}) {
				versions = append(versions, v)
			}
		}
		if len(versions) > 0 {
			g.Versions = versions
			out = append(out, g)
		}
	}
	return out
}

// isCRD tells whether a CRD serves gvr (clusterwide.Resource): the
// informer holds CRDs' metadata only, so a CRD named <plural>.<group>
// counts as serving every version this server lists.
func (l *Local) isCRD(gvr schema.GroupVersionResource) bool {
	name := clusterwide.CRDName(gvr.GroupResource())
	if _, ok, _ := l.crds.GetStore().GetByKey(name); !ok {
		return false
	}
	crd, ok := clusterwide.CRDFromName(name)
	if !ok {
		return false
	}
	src, _ := clusterwide.Resource(gvr, &crd, nil)
	return src == clusterwide.SourceCRD
}

// isAggregated tells whether an aggregated APIService serves gv: one named
// <version>.<group> with a service (clusterwide.APIService).
func (l *Local) isAggregated(gv schema.GroupVersion) bool {
	o, ok, _ := l.apiServices.GetStore().GetByKey(clusterwide.APIServiceName(gv))
	if !ok {
		return false
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	service, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "service")
	as := clusterwide.APIService{Group: gv.Group, Version: gv.Version, Service: service != nil}
	return as.ClusterWide()
}
