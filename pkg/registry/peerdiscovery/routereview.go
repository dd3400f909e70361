package peerdiscovery

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// routeReviewREST answers RouteReviews, like SubjectAccessReview: create
// only, nothing stored, the answer in status. It is in no category: `kubectl
// get peerdiscovery` lists, and a review cannot be listed.
type routeReviewREST struct {
	view *ViewStore
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

func (r *routeReviewREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, _ *metav1.CreateOptions) (runtime.Object, error) {
	review, ok := obj.(*api.RouteReview)
	if !ok {
		return nil, apierrors.NewBadRequest("not a RouteReview")
	}
	if errs := validateRouteReview(review); len(errs) > 0 {
		return nil, apierrors.NewInvalid(api.Kind("RouteReview"), review.Name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	table, published := r.view.RoutingTable()
	if !published {
		return nil, apierrors.NewServiceUnavailable("no routing view computed yet")
	}
	status, err := routing.Review(table, v1alpha1.RouteReviewSpec{
		Verb: review.Spec.Verb, Path: review.Spec.Path, SourcePeer: review.Spec.SourcePeer,
	})
	if err != nil {
		return nil, apierrors.NewInvalid(api.Kind("RouteReview"), review.Name,
			field.ErrorList{field.Invalid(field.NewPath("spec", "path"), review.Spec.Path, err.Error())})
	}
	out := review.DeepCopy()
	if err := v1alpha1.Convert_v1alpha1_RouteReviewStatus_To_peerdiscovery_RouteReviewStatus(&status, &out.Status, nil); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

func validateRouteReview(r *api.RouteReview) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if r.Spec.Verb == "" {
		errs = append(errs, field.Required(spec.Child("verb"), "an HTTP method or a Kubernetes verb"))
	}
	if !strings.HasPrefix(r.Spec.Path, "/") {
		errs = append(errs, field.Invalid(spec.Child("path"), r.Spec.Path, "must be an absolute request path, e.g. /apis/apps/v1/deployments"))
	}
	return errs
}
