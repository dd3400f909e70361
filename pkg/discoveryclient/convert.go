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

package discoveryclient

import (
	"context"

	"sigs.k8s.io/peerdiscovery/pkg/merge"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// view is one immutable, fully converted merged document. Everything a read
// returns is computed once, when the watch delivers a new object, so reads
// are a pointer load and (at most) copies of small outer slices.
type view struct {
	resourceVersion string
	apiETag         string
	apisETag        string

	groupList *metav1.APIGroupList
	groups    []*metav1.APIGroup // pointers into groupList.Groups, in discovery order
	// lists are the APIResourceLists in group/version discovery order.
	lists []*metav1.APIResourceList
	byGV  map[schema.GroupVersion]*metav1.APIResourceList
	// byGVString indexes lists by "group/version" ("v1" for core).
	byGVString map[string]*metav1.APIResourceList
	// failed are the GroupVersions the merged document marks Stale.
	failed map[schema.GroupVersion]error

	preferred           []*metav1.APIResourceList
	preferredNamespaced []*metav1.APIResourceList
	gvrCount            int
}

// newView converts a PeerAggregatedDiscovery with the conversion client-go
// uses for aggregated discovery (discovery.SplitGroupsAndResources): the
// legacy /api groups first, then /apis, as client-go's DiscoveryClient
// merges them; the preferred version of a group is its first non-stale
// version; subresources become "resource/subresource" entries.
func newView(obj *v1alpha1.PeerAggregatedDiscovery) *view {
	items := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(obj.Status.API.Items)+len(obj.Status.APIs.Items))
	items = append(items, obj.Status.API.Items...)
	items = append(items, obj.Status.APIs.Items...)
	groupList, byGV, failed := discovery.SplitGroupsAndResources(apidiscoveryv2.APIGroupDiscoveryList{Items: items})

	v := &view{
		resourceVersion: obj.ResourceVersion,
		apiETag:         obj.Status.API.ETag,
		apisETag:        obj.Status.APIs.ETag,
		groupList:       groupList,
		byGV:            byGV,
		failed:          failed,
		byGVString:      make(map[string]*metav1.APIResourceList, len(byGV)),
	}
	v.groups = make([]*metav1.APIGroup, len(groupList.Groups))
	for i := range groupList.Groups {
		v.groups[i] = &groupList.Groups[i]
		for _, ver := range groupList.Groups[i].Versions {
			gv := schema.GroupVersion{Group: groupList.Groups[i].Name, Version: ver.Version}
			if l, ok := byGV[gv]; ok {
				v.lists = append(v.lists, l)
				v.byGVString[ver.GroupVersion] = l
			}
		}
	}
	v.gvrCount = merge.CountResources(items)
	// Preferred resources with client-go's own algorithm, run once over
	// this view.
	v.preferred, _ = discovery.ServerPreferredResourcesWithContext(context.Background(), viewDiscovery{v: v})
	v.preferredNamespaced = discovery.FilteredBy(discovery.ResourcePredicateFunc(func(_ string, r *metav1.APIResource) bool {
		return r.Namespaced
	}), v.preferred)
	return v
}

// failedErr is the partial-result error client-go returns for stale
// GroupVersions, or nil.
func (v *view) failedErr() error {
	if len(v.failed) == 0 {
		return nil
	}
	return &discovery.ErrGroupDiscoveryFailed{Groups: v.failed}
}

// viewDiscovery adapts a view to client-go's AggregatedDiscoveryInterface so
// that client-go's own ServerPreferredResources computes the preferred
// resources. Only GroupsAndMaybeResourcesWithContext is ever called; the
// embedded nil interface is never used.
type viewDiscovery struct {
	discovery.DiscoveryInterfaceWithContext
	v *view
}

func (d viewDiscovery) GroupsAndMaybeResourcesWithContext(context.Context) (*metav1.APIGroupList, map[schema.GroupVersion]*metav1.APIResourceList, map[schema.GroupVersion]error, error) {
	return d.v.groupList, d.v.byGV, d.v.failed, nil
}
