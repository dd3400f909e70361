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

package integration

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// TestRouteReview: the answers of RouteReview through the real stack:
// 503 with Retry-After before a view, the decision after, 422 naming the
// field for a bad spec or an unknown source, never echoing a large input.
func TestRouteReview(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	c := ts.clientset(t, ts.admin()).PeerdiscoveryV1alpha1()
	spec := v1alpha1.RouteReviewSpec{Verb: "get", Path: "/apis/resource.k8s.io/v1beta2/deviceclasses", SourcePeer: "kube-apiserver-b"}

	// Before a view: 503 with Retry-After (client-go would retry it).
	err := c.RESTClient().Post().Resource("routereviews").MaxRetries(0).Body(&v1alpha1.RouteReview{Spec: spec}).Do(ctx).Error()
	if seconds, ok := apierrors.SuggestsClientDelay(err); !apierrors.IsServiceUnavailable(err) || !ok || seconds <= 0 || !strings.Contains(err.Error(), "no routing view computed yet") {
		t.Fatalf("review before a view: %v (Retry-After %d %v), want 503 with Retry-After", err, seconds, ok)
	}

	if err := ts.srv.Publisher.Publish(view(1, true)); err != nil {
		t.Fatal(err)
	}
	r, err := c.RouteReviews().Create(ctx, &v1alpha1.RouteReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Status; st.Decision != v1alpha1.RouteProxy || st.Target != "kube-apiserver-a" || len(st.Candidates) != 1 || len(st.Assumptions) == 0 {
		t.Fatalf("review: %+v", st)
	}
	proxied := spec
	proxied.PeerProxied = true
	if r, err := c.RouteReviews().Create(ctx, &v1alpha1.RouteReview{Spec: proxied}, metav1.CreateOptions{}); err != nil || r.Status.Decision != v1alpha1.RouteLocal {
		t.Fatalf("already proxied: %+v, %v", r, err)
	}

	for _, tc := range []struct {
		name  string
		spec  v1alpha1.RouteReviewSpec
		field string
		says  string
	}{
		{"unknown source", v1alpha1.RouteReviewSpec{Verb: "get", Path: spec.Path, SourcePeer: "kube-apiserver-c"}, "spec.sourcePeer", "known: kube-apiserver-a, kube-apiserver-b"},
		{"unknown verb", v1alpha1.RouteReviewSpec{Verb: "fetch", Path: spec.Path}, "spec.verb", `supported values: "DELETE"`},
		{"huge path", v1alpha1.RouteReviewSpec{Verb: "get", Path: "/" + strings.Repeat("a", 1<<20)}, "spec.path", "may not be more than 4096 bytes"},
		{"unparsable path", v1alpha1.RouteReviewSpec{Verb: "get", Path: "/" + strings.Repeat("a", 4000) + "%zz"}, "spec.path", `invalid URL escape "%zz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.RouteReviews().Create(ctx, &v1alpha1.RouteReview{Spec: tc.spec}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("%v, want 422 Invalid", err)
			}
			st := err.(apierrors.APIStatus).Status()
			if len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.field || !strings.Contains(st.Message, tc.says) {
				t.Fatalf("causes %+v, message %.300q; want one on %s saying %q", st.Details.Causes, st.Message, tc.field, tc.says)
			}
			if len(st.Message) > 1024 {
				t.Fatalf("a message of %d bytes", len(st.Message))
			}
		})
	}
}
