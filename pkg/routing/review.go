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

package routing

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// RequestInfoFactory parses paths as kube-apiserver does for the filter
// (upstream's server.NewRequestInfoResolver with the legacy /api prefix; a
// test keeps them equal), so a review parses a path the way the real
// request is parsed. It is built here rather than taken from
// k8s.io/apiserver/pkg/server: that package would weigh on the kubectl
// plugin, which imports this one.
var RequestInfoFactory = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// reviewMethods maps each verb a review accepts to the HTTP method of the
// request: the Kubernetes request verbs, and the methods themselves.
var reviewMethods = map[string]string{
	"get": http.MethodGet, "list": http.MethodGet, "watch": http.MethodGet,
	"create": http.MethodPost, "update": http.MethodPut, "patch": http.MethodPatch,
	"delete": http.MethodDelete, "deletecollection": http.MethodDelete,
	http.MethodGet: http.MethodGet, http.MethodHead: http.MethodHead, http.MethodPost: http.MethodPost,
	http.MethodPut: http.MethodPut, http.MethodPatch: http.MethodPatch, http.MethodDelete: http.MethodDelete,
}

// ReviewVerbs lists the verbs a RouteReview accepts, sorted.
func ReviewVerbs() []string {
	verbs := make([]string, 0, len(reviewMethods))
	for v := range reviewMethods {
		verbs = append(verbs, v)
	}
	slices.Sort(verbs)
	return verbs
}

// errUnknownVerb is ParseReviewRequest's error for a verb not in
// ReviewVerbs.
var errUnknownVerb = errors.New("not a Kubernetes request verb or HTTP method")

// ParseReviewRequest parses a review's verb and path as kube-apiserver
// parses the real request. Its errors never quote the path: it comes from
// the client and may be large.
func ParseReviewRequest(verb, path string) (*request.RequestInfo, error) {
	method, ok := reviewMethods[verb]
	if !ok {
		return nil, errUnknownVerb
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		// url.Error quotes the whole input; its inner error names only the
		// offending part (e.g. an escape).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a request path: %w", err)
	}
	info, err := RequestInfoFactory.NewRequestInfo(&http.Request{Method: method, URL: u})
	if err != nil {
		// Its only error quotes the URL.
		return nil, errors.New("a watch or proxy path must name a resource, as in /api/v1/watch/pods")
	}
	return info, nil
}

// Review answers a RouteReview with the filter's decision, Decide (or
// DecideGroupVersion for a group-version's resource list), on view (the
// extension's routing tables, APIServerPeers and registration Leases) as
// server spec.SourcePeer sees it, for the request as kube-apiserver parses
// it. source is the APIServerPeer of spec.SourcePeer (nil when none is
// named). A source serves a GVR when its routing table lists it and it has
// not left (ListedLocal); no source is a server that serves exactly what
// every peer serves; a view that is the source's own snapshot (Self is the
// source, Local set: a filter's) is decided on as it is. What the filter decides from that the API does not
// show is in the status's Assumptions.
func Review(view *Snapshot, spec v1alpha1.RouteReviewSpec, source *v1alpha1.APIServerPeer, now time.Time) (v1alpha1.RouteReviewStatus, error) {
	info, err := ParseReviewRequest(spec.Verb, spec.Path)
	if err != nil {
		return v1alpha1.RouteReviewStatus{}, err
	}
	s := view
	if s.Local == nil || s.Self != spec.SourcePeer {
		// The view from outside the source: what its tables list it for.
		var local Local = everyPeerServes{t: view.Table}
		if spec.SourcePeer != "" {
			local = ListedLocal(view.Table, spec.SourcePeer)
		}
		s = view.As(spec.SourcePeer, local)
	}
	if !spec.PeerProxied {
		if gv, ok := resourceListPath(info); ok {
			return reviewGroupVersion(s, gv, now), nil
		}
		if doc, ok := documentPath(info); ok {
			return reviewDocument(s, doc, now), nil
		}
	}
	req := Request{
		IsResourceRequest: info.IsResourceRequest,
		GVR:               schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource},
		AlreadyProxied:    spec.PeerProxied,
	}
	res := Decide(s, req, now)
	status := v1alpha1.RouteReviewStatus{Decision: res.Decision, Reason: res.Reason()}
	if info.IsResourceRequest {
		status.Group, status.Version, status.Resource = req.GVR.Group, req.GVR.Version, req.GVR.Resource
	}
	candidates := reviewCandidates(res, spec.SourcePeer)
	if res.Decision == v1alpha1.RouteProxy {
		status.Target, status.TargetEndpoint = candidates[0].ID, candidates[0].Endpoint
	}
	for _, p := range candidates {
		status.Candidates = append(status.Candidates, v1alpha1.RouteCandidate{ServerID: p.ID, Endpoint: p.Endpoint, Ready: p.Ready, Left: p.Left})
	}
	status.Assumptions = assumptions(req, res, spec, source)
	return status, nil
}

// everyPeerServes is the Local of a review without a source: a server that
// serves exactly what every peer serves.
type everyPeerServes struct{ t *Table }

func (l everyPeerServes) Serves(gvr schema.GroupVersionResource) bool {
	r := l.t.Lookup(gvr)
	return r != nil && r.ServedByAll
}

// resourceListPath tells whether a request is for a group-version's
// legacy resource list (/api/v1, /apis/<group>/<version>), which the
// filter routes with DecideGroupVersion.
func resourceListPath(info *request.RequestInfo) (schema.GroupVersion, bool) {
	if info.IsResourceRequest || info.Verb != "get" {
		return schema.GroupVersion{}, false
	}
	parts := strings.Split(strings.Trim(info.Path, "/"), "/")
	switch {
	case len(parts) == 2 && parts[0] == "api" && parts[1] == "v1":
		return schema.GroupVersion{Version: "v1"}, true
	case len(parts) == 3 && parts[0] == "apis" && parts[1] != "" && parts[2] != "":
		return schema.GroupVersion{Group: parts[1], Version: parts[2]}, true
	}
	return schema.GroupVersion{}, false
}

// documentPath tells whether a request is for a root discovery document
// (/api, /apis: doc is the path) or a group's (/apis/<group>: the group),
// which the filter decides with DecideRoot and DecideGroup.
func documentPath(info *request.RequestInfo) (string, bool) {
	if info.IsResourceRequest || info.Verb != "get" {
		return "", false
	}
	parts := strings.Split(strings.Trim(info.Path, "/"), "/")
	switch {
	case len(parts) == 1 && (parts[0] == "api" || parts[0] == "apis"):
		return "/" + parts[0], true
	case len(parts) == 2 && parts[0] == "apis" && parts[1] != "":
		return parts[1], true
	}
	return "", false
}

// MergedDocumentReason is a review's reason for a root document served
// from the view.
const MergedDocumentReason = "the cluster's discovery document, merged from the view"

// reviewDocument is Review for a root or group discovery document.
func reviewDocument(s *Snapshot, doc string, now time.Time) v1alpha1.RouteReviewStatus {
	root := strings.HasPrefix(doc, "/")
	var res GroupVersionResult
	if root {
		res = DecideRoot(s, doc == "/api", now)
	} else {
		res = DecideGroup(s, doc, now)
	}
	status := v1alpha1.RouteReviewStatus{Decision: res.Decision, Reason: res.Reason()}
	switch {
	case res.Decision == v1alpha1.RouteUnavailable:
		status.Group, status.Version = res.GroupVersion.Group, res.GroupVersion.Version
	case root && s.Table != nil:
		status.Reason = MergedDocumentReason
	default:
		status.Reason = "the discovery document " + doc + ": this server's own chain answers (or the merged view, where it lists the group)"
	}
	return status
}

// reviewGroupVersion is Review for a group-version's resource list.
func reviewGroupVersion(s *Snapshot, gv schema.GroupVersion, now time.Time) v1alpha1.RouteReviewStatus {
	res := DecideGroupVersion(s, gv, now)
	status := v1alpha1.RouteReviewStatus{Decision: res.Decision, Group: gv.Group, Version: gv.Version}
	switch res.Decision {
	case v1alpha1.RouteProxy:
		status.Target, status.TargetEndpoint = res.Candidates[0].ID, res.Candidates[0].Endpoint
		status.Reason = fmt.Sprintf("the resource list of %s: %s serves more of it than this server; proxy to %s", gv, peerIDs(res.Candidates), res.Candidates[0].ID)
		if res.Split {
			status.Reason = fmt.Sprintf("the resource list of %s: no ready server serves all of it; this server answers with the list merged from the view (%s serves %d resources of it, this server %d)", gv, res.Candidates[0].ID, res.PeerServes, res.LocalServes)
			status.Target, status.TargetEndpoint = "", ""
		}
		for _, p := range res.Candidates {
			status.Candidates = append(status.Candidates, v1alpha1.RouteCandidate{ServerID: p.ID, Endpoint: p.Endpoint, Ready: p.Ready, Left: p.Left})
		}
	case v1alpha1.RouteUnavailable:
		status.Reason = res.Reason()
	case v1alpha1.RouteLocal:
		status.Reason = "the resource list of " + gv.String() + ": this server serves every resource of it that a ready server serves"
	default:
		status.Reason = "the resource list of " + gv.String() + ": no route names it; this server's own chain answers"
	}
	return status
}

// reviewCandidates are the peers other than the source that the route
// lists, in the source's order of preference: for Proxy the ready ones,
// exactly those the filter tries; otherwise every one, with its state.
func reviewCandidates(res Result, source string) []Peer {
	if res.Decision == v1alpha1.RouteProxy {
		return res.Candidates
	}
	if res.Route == nil {
		return nil
	}
	var others []Peer
	for _, p := range res.Route.Peers {
		if p.ID != source {
			others = append(others, p)
		}
	}
	orderCandidates(source, others)
	return others
}

// assumptions says, for one decision, what the filter on the source would
// decide from that the review cannot read from the API state.
func assumptions(req Request, res Result, spec v1alpha1.RouteReviewSpec, source *v1alpha1.APIServerPeer) []string {
	if !req.IsResourceRequest || req.AlreadyProxied {
		// Decided from the request alone.
		return nil
	}
	var out []string
	if source == nil {
		out = append(out, "no sourcePeer: the source is taken to serve exactly the resources every peer serves")
	} else {
		id := source.Spec.ServerID
		read := "never"
		if source.Status.LastSyncTime != nil {
			read = "at " + source.Status.LastSyncTime.UTC().Format(time.RFC3339)
		}
		if source.Status.Stale {
			read += ", a copy kept after failed reads"
		}
		out = append(out, fmt.Sprintf("%s serves the resources its routing tables list it for: its discovery as peerdiscovery last read it (%s); its filter reads its live discovery", id, read))
		if source.Status.LeftTime != nil {
			out = append(out, id+" has left: a request reaches it only once it is back, serving what its discovery then says")
		} else if !slices.Contains(source.Spec.Sources, v1alpha1.PeerSourceRegistrationLease) {
			out = append(out, id+" has no registration Lease: it may not run the peerdiscovery filter; without it, its own chain answers every request (404 for a resource it does not serve)")
		}
	}
	if res.Decision != v1alpha1.RouteLocal || res.Route != nil {
		out = append(out, "the source's filter has synced its routing state: until it has, within its sync grace period after start, a resource it does not serve gets 503, and after that its own chain answers")
	}
	if res.Decision == v1alpha1.RouteNotFound || res.Decision == v1alpha1.RouteUnavailable {
		out = append(out, "no live server's registration Lease records this resource and vouches for it, as the extension last read the Leases: the source's filter reads them from its own watch cache, which may be ahead; a live server whose Lease records the resource is proxied to when no route names it yet (never 404), or when the filter cannot read the view and the Lease was renewed after the view last saw it not ready")
	}
	if res.Decision == v1alpha1.RouteUnavailable {
		out = append(out, "decided at the review's time: the 503 carries Retry-After: 1 (and the reason says so) while a candidate that did not shut down stopped being ready less than "+RecoveryWindow.String()+" before the request, none after")
	}
	if res.Decision == v1alpha1.RouteProxy {
		if m := reviewMethods[spec.Verb]; m == http.MethodGet || m == http.MethodHead {
			out = append(out, "the candidates can be reached: at request time one that fails before answering is skipped for the next; 503 when none answers (with Retry-After, unless the registration Lease of each records a departure or lapsed over "+RecoveryWindow.String()+" before)")
		} else {
			out = append(out, "the candidates can be reached: at request time one that cannot be connected to is skipped for the next, but a request it may have received is never sent again (502, or 504 on a timeout); 503 when none can be connected to (with Retry-After, unless the registration Lease of each records a departure or lapsed over "+RecoveryWindow.String()+" before)")
		}
	}
	return out
}
