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

package discovery

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/client-go/discovery"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
	"sigs.k8s.io/peerdiscovery/pkg/filter/status"
	"sigs.k8s.io/peerdiscovery/pkg/filter/views"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// servedObject is a merged legacy document and its ETag.
type servedObject struct {
	obj  runtime.Object
	etag string
}

// legacyView is the legacy form of the combined aggregated view: what
// client-go's legacy path, older kubectl and the other languages' dynamic
// clients read. It is derived from the combined document with client-go's
// own conversion (discovery.SplitGroupsAndResources), so order and
// preferred versions are the aggregated view's.
type legacyView struct {
	groups *metav1.APIGroupList
	byName map[string]*metav1.APIGroup
	lists  map[schema.GroupVersion]*metav1.APIResourceList
	// localVersions are the versions of each group this server serves.
	localVersions map[string]map[string]bool

	mu    sync.Mutex
	etags map[any]string // group name, group-version or "" (the list) -> ETag
}

func newLegacyView(api, apis []apidiscoveryv2.APIGroupDiscovery, local *views.LocalDoc) *legacyView {
	groups, lists, _ := discovery.SplitGroupsAndResources(apidiscoveryv2.APIGroupDiscoveryList{Items: apis})
	_, core, _ := discovery.SplitGroupsAndResources(apidiscoveryv2.APIGroupDiscoveryList{Items: api})
	for gv, l := range core {
		lists[gv] = l
	}
	v := &legacyView{
		groups:        groups,
		byName:        make(map[string]*metav1.APIGroup, len(groups.Groups)),
		lists:         lists,
		localVersions: map[string]map[string]bool{},
		etags:         map[any]string{},
	}
	for i := range groups.Groups {
		v.byName[groups.Groups[i].Name] = &groups.Groups[i]
	}
	for gv, l := range lists {
		for i := range l.APIResources {
			// The legacy form names another group-version only where the
			// kind lives elsewhere (autoscaling/v1 Scale), and subresources
			// have no singular name.
			res := &l.APIResources[i]
			if res.Group == gv.Group && res.Version == gv.Version {
				res.Group, res.Version = "", ""
			}
			if strings.Contains(res.Name, "/") {
				res.SingularName = ""
			}
		}
	}
	for _, doc := range [][]apidiscoveryv2.APIGroupDiscovery{local.API, local.APIs} {
		for _, g := range doc {
			for _, ver := range g.Versions {
				if v.localVersions[g.Name] == nil {
					v.localVersions[g.Name] = map[string]bool{}
				}
				v.localVersions[g.Name][ver.Version] = true
			}
		}
	}
	return v
}

// group returns the merged APIGroup of name and whether this server serves
// every one of its versions (then the local chain answers it the same).
func (v *legacyView) group(name string) (*metav1.APIGroup, bool) {
	g := v.byName[name]
	if g == nil {
		return nil, false
	}
	for _, ver := range g.Versions {
		if !v.localVersions[name][ver.Version] {
			return g, false
		}
	}
	return g, true
}

// etag returns the ETag of the object known by key, computed once.
func (v *legacyView) etag(key any, obj runtime.Object) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.etags[key]; ok {
		return e
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return ""
	}
	e := fmt.Sprintf("%X", sha512.Sum512(b))
	v.etags[key] = e
	return e
}

// serveLegacyObject writes a merged legacy document with its ETag, or 304
// when the client has it. The encoding is negotiated as upstream's legacy
// discovery handlers do (negotiation.DefaultEndpointRestrictions).
func serveLegacyObject(w http.ResponseWriter, r *http.Request, obj servedObject) {
	if obj.etag != "" {
		quoted := strconv.Quote(obj.etag)
		w.Header().Set("ETag", quoted)
		w.Header().Set("Vary", "Accept")
		if r.Header.Get("If-None-Match") == quoted {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	responsewriters.WriteObjectNegotiated(codecs, negotiation.DefaultEndpointRestrictions, schema.GroupVersion{}, w, r, http.StatusOK, shallowCopy(obj.obj), false)
}

// shallowCopy gives each request its own TypeMeta, which the encoder sets
// while it writes; the rest of the cached document is shared, read-only.
func shallowCopy(obj runtime.Object) runtime.Object {
	switch o := obj.(type) {
	case *metav1.APIGroupList:
		c := *o
		return &c
	case *metav1.APIGroup:
		c := *o
		return &c
	case *metav1.APIResourceList:
		c := *o
		return &c
	}
	return obj.DeepCopyObject()
}

// discoveryPath is what a discovery path names: /apis/<group> (group set,
// version empty), /apis/<group>/<version> or /api/v1 (both set; core has
// group ""). ok is false for any other path.
type discoveryPath struct {
	group, version string
	core           bool
}

func parseDiscoveryPath(path string) (discoveryPath, bool) {
	if path == "/api/v1" {
		return discoveryPath{version: "v1", core: true}, true
	}
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok || rest == "" {
		return discoveryPath{}, false
	}
	group, version, hasVersion := strings.Cut(rest, "/")
	if group == "" || (hasVersion && (version == "" || strings.Contains(version, "/"))) {
		return discoveryPath{}, false
	}
	return discoveryPath{group: group, version: version}, true
}

func (p discoveryPath) groupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: p.group, Version: p.version}
}

// groupKey and the group-version key the ETags of /apis/<group> and of a
// merged resource list in legacyView.etags.
type groupKey string

// serveGroup answers /apis/<group> with the merged APIGroup when peers
// serve versions of it this server does not.
func (d *Server) serveGroup(w http.ResponseWriter, r *http.Request, name string) bool {
	v := d.legacyView(d.self)
	if v == nil {
		return false
	}
	g, local := v.group(name)
	switch {
	case g != nil && local:
		metrics.DiscoveryServed(metrics.EndpointGroup, metrics.SourceLocal)
		return false
	case g != nil:
		metrics.DiscoveryServed(metrics.EndpointGroup, metrics.SourceMerged)
		serveLegacyObject(w, r, servedObject{obj: g, etag: v.etag(groupKey(name), g)})
		return true
	}
	// Not in the merged view: 503 while a server that served it has left
	// and its tombstone stands, as for its resources, or while a live
	// peer's registration Lease records it and no view lists it yet.
	res := routing.DecideGroup(d.views.Snapshot(), name, d.now())
	if res.Decision != v1alpha1.RouteUnavailable {
		metrics.DiscoveryServed(metrics.EndpointGroup, metrics.SourceLocal)
		return false
	}
	metrics.DiscoveryServed(metrics.EndpointGroup, metrics.SourceUnavailable)
	d.groupVersionUnavailable(w, r, res)
	return true
}

// serveResourceList answers /apis/<group>/<version> and /api/v1 for a
// group-version a peer serves more of than this server: proxied to a peer
// serving all of it (its bytes are the answer), or, when no single server
// does, the list derived from the combined aggregated view.
func (d *Server) serveResourceList(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion) bool {
	snap := d.views.Snapshot()
	res := routing.DecideGroupVersion(snap, gv, d.now())
	switch res.Decision {
	case v1alpha1.RouteUnavailable:
		metrics.DiscoveryServed(metrics.EndpointResourceList, metrics.SourceUnavailable)
		d.groupVersionUnavailable(w, r, res)
		return true
	case v1alpha1.RouteProxy:
	default:
		// NotFound: not in the routes the filter keeps, which leave out
		// cluster-wide ones (CRDs, aggregated APIs): the chain serves
		// those.
		metrics.DiscoveryServed(metrics.EndpointResourceList, metrics.SourceLocal)
		return false
	}
	if !res.Split {
		metrics.DiscoveryServed(metrics.EndpointResourceList, metrics.SourcePeer)
		d.proxy.Serve(w, r, proxy.Target{Candidates: res.Candidates, About: status.GroupVersionSubject(gv), Decided: snap})
		return true
	}
	v := d.legacyView(d.self)
	if v == nil || v.lists[gv] == nil {
		metrics.DiscoveryServed(metrics.EndpointResourceList, metrics.SourceLocal)
		return false
	}
	metrics.DiscoveryServed(metrics.EndpointResourceList, metrics.SourceMerged)
	l := v.lists[gv]
	serveLegacyObject(w, r, servedObject{obj: l, etag: v.etag(gv, l)})
	return true
}
