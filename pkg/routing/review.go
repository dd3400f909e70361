package routing

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// RequestInfoFactory parses paths exactly as kube-apiserver does for the
// filter, so a review parses a path the way the real request is parsed.
var RequestInfoFactory = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

var verbToMethod = map[string]string{
	"get": http.MethodGet, "list": http.MethodGet, "watch": http.MethodGet,
	"create": http.MethodPost, "update": http.MethodPut, "patch": http.MethodPatch,
	"delete": http.MethodDelete, "deletecollection": http.MethodDelete,
}

// Review answers a RouteReview from the same tables and decision the
// filter uses. A source peer serves a GVR when the routing table lists it
// (and it has not left); no source peer means a server that serves only
// what every peer serves.
func Review(t *Table, spec v1alpha1.RouteReviewSpec) (v1alpha1.RouteReviewStatus, error) {
	method := strings.ToUpper(spec.Verb)
	if m, ok := verbToMethod[strings.ToLower(spec.Verb)]; ok {
		method = m
	}
	u, err := url.ParseRequestURI(spec.Path)
	if err != nil {
		return v1alpha1.RouteReviewStatus{}, fmt.Errorf("spec.path: %w", err)
	}
	info, err := RequestInfoFactory.NewRequestInfo(&http.Request{Method: method, URL: u})
	if err != nil {
		return v1alpha1.RouteReviewStatus{}, fmt.Errorf("spec.path: %w", err)
	}
	req := Request{
		IsResourceRequest: info.IsResourceRequest,
		GVR:               schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource},
	}
	var local Local = LocalFunc(func(gvr schema.GroupVersionResource) bool {
		r := t.Lookup(gvr)
		return r != nil && r.ServedByAll
	})
	if spec.SourcePeer != "" {
		local = ListedLocal(t, spec.SourcePeer)
	}
	res := Decide(t, req, spec.SourcePeer, local)
	status := v1alpha1.RouteReviewStatus{Decision: res.Decision, Reason: res.Reason()}
	if info.IsResourceRequest {
		status.Group, status.Version, status.Resource = req.GVR.Group, req.GVR.Version, req.GVR.Resource
	}
	var peers []Peer
	if res.Route != nil {
		peers = res.Route.Peers
	}
	if res.Decision == v1alpha1.RouteProxy {
		peers = res.Candidates
		status.Target, status.TargetEndpoint = res.Candidates[0].ID, res.Candidates[0].Endpoint
	}
	for _, p := range peers {
		status.Candidates = append(status.Candidates, v1alpha1.RoutingPeer{ServerID: p.ID, Endpoint: p.Endpoint, Ready: p.Ready, Left: p.Left})
	}
	return status, nil
}
