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

package peerdiscovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// reviewRetryAfterSeconds is the Retry-After of a review that has no
// routing state to answer from yet: client-go retries a 503 that carries it.
const reviewRetryAfterSeconds = 5

// routeReviewREST answers RouteReviews, like SubjectAccessReview: create
// only, nothing stored, the answer in status. It is in no category: `kubectl
// get peerdiscovery` lists, and a review cannot be listed.
type routeReviewREST struct {
	view viewSource
}

// viewSource is the last published view: what reviews are decided on.
type viewSource interface {
	// Routing returns the decision state (routing table and registration
	// Leases) and the APIServerPeers, sorted by server ID, and whether a
	// view was published.
	Routing() (*routing.Snapshot, []v1alpha1.APIServerPeer, bool)
}

var (
	_ rest.Creater              = &routeReviewREST{}
	_ rest.Scoper               = &routeReviewREST{}
	_ rest.SingularNameProvider = &routeReviewREST{}
)

func (r *routeReviewREST) New() runtime.Object     { return &api.RouteReview{} }
func (r *routeReviewREST) Destroy()                {}
func (r *routeReviewREST) NamespaceScoped() bool   { return false }
func (r *routeReviewREST) GetSingularName() string { return "routereview" }

// Create decides the review. An invalid spec, or a sourcePeer no
// APIServerPeer has, is 422 Invalid; no routing state to decide from is
// 503 with Retry-After.
func (r *routeReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*api.RouteReview)
	if !ok {
		return nil, apierrors.NewBadRequest("not a RouteReview")
	}
	errs := validateRouteReviewSpec(&review.Spec)
	view, peers, unavailable := r.inputs()
	var source *v1alpha1.APIServerPeer
	if unavailable == nil && review.Spec.SourcePeer != "" && len(errs) == 0 {
		var notFound *field.Error
		if source, notFound = findSource(peers, review.Spec.SourcePeer); notFound != nil {
			errs = append(errs, notFound)
		}
	}
	// A spec that is invalid whatever the state is rejected even without
	// state: retrying it would not help.
	if len(errs) > 0 {
		// The name is the client's too (a review is never stored, so nothing
		// else checks it): bounded like the values.
		return nil, apierrors.NewInvalid(api.Kind("RouteReview"), echo(review.Name), errs)
	}
	if unavailable != nil {
		return nil, unavailable
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	var spec v1alpha1.RouteReviewSpec
	if err := v1alpha1.Convert_peerdiscovery_RouteReviewSpec_To_v1alpha1_RouteReviewSpec(&review.Spec, &spec, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	status, err := routing.Review(view, spec, source, time.Now())
	if err != nil {
		// Validated above: a parse failure here is a bug.
		return nil, apierrors.NewInternalError(err)
	}
	out := review.DeepCopy()
	if err := v1alpha1.Convert_v1alpha1_RouteReviewStatus_To_peerdiscovery_RouteReviewStatus(&status, &out.Status, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// inputs returns the routing table and the APIServerPeers (sorted by
// server ID) to decide on, or the 503 that says why there are none.
func (r *routeReviewREST) inputs() (*routing.Snapshot, []v1alpha1.APIServerPeer, error) {
	table, peers, published := r.view.Routing()
	switch {
	case !published:
		return nil, nil, serviceUnavailable("RouteReview cannot be decided yet: no routing view computed yet (the peer engine has not published one since this server started)")
	case len(peers) == 0:
		return nil, nil, serviceUnavailable("RouteReview cannot be decided yet: peerdiscovery knows no kube-apiserver yet")
	}
	return table, peers, nil
}

// serviceUnavailable is a 503 with Retry-After.
func serviceUnavailable(msg string) error {
	err := apierrors.NewServiceUnavailable(msg)
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: reviewRetryAfterSeconds}
	return err
}

// findSource returns the peer whose server ID is id, or an Invalid error
// naming at most maxNamedPeers of the known ones.
func findSource(peers []v1alpha1.APIServerPeer, id string) (*v1alpha1.APIServerPeer, *field.Error) {
	i := slices.IndexFunc(peers, func(p v1alpha1.APIServerPeer) bool { return p.Spec.ServerID == id })
	if i >= 0 {
		return &peers[i], nil
	}
	ids := make([]string, 0, min(len(peers), maxNamedPeers))
	for _, p := range peers[:min(len(peers), maxNamedPeers)] {
		ids = append(ids, p.Spec.ServerID)
	}
	known := strings.Join(ids, ", ")
	if more := len(peers) - len(ids); more > 0 {
		known += fmt.Sprintf(" and %d more", more)
	}
	return nil, field.Invalid(sourcePeerPath, echo(id), "no APIServerPeer has this serverID; known: "+known)
}
