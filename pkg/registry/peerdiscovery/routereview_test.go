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
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

func createReview(v *testView, spec api.RouteReviewSpec) (*api.RouteReview, error) {
	obj, err := v.storage["routereviews"].(rest.Creater).Create(context.Background(), &api.RouteReview{Spec: spec}, nil, &metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*api.RouteReview), nil
}

func TestRouteReviewDecides(t *testing.T) {
	v := newTestView(t)
	publish(t, v, testOutput(true))
	r, err := createReview(v, api.RouteReviewSpec{Verb: "get", Path: "/apis/resource.k8s.io/v1beta2/deviceclasses", SourcePeer: "b"})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Status
	if st.Decision != api.RouteProxy || st.Target != "a" || st.TargetEndpoint != "a.example:6443" || len(st.Candidates) != 1 ||
		st.Group != "resource.k8s.io" || st.Resource != "deviceclasses" || st.Reason == "" || len(st.Assumptions) == 0 {
		t.Fatalf("review: %+v", st)
	}
	if r.Spec.SourcePeer != "b" {
		t.Fatalf("spec not echoed: %+v", r.Spec)
	}
	r, err = createReview(v, api.RouteReviewSpec{Verb: "get", Path: "/apis/resource.k8s.io/v1beta2/deviceclasses", SourcePeer: "b", PeerProxied: true})
	if err != nil || r.Status.Decision != api.RouteLocal || len(r.Status.Assumptions) != 0 {
		t.Fatalf("already proxied: %+v, %v", r, err)
	}
}

// reviewInvalid asserts a 422 whose causes are exactly the given fields
// (each once) and whose whole Status stays small whatever the input.
func reviewInvalid(t *testing.T, v *testView, spec api.RouteReviewSpec, fields ...string) metav1.Status {
	t.Helper()
	_, err := createReview(v, spec)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("%.80v: %v, want 422 Invalid", spec, err)
	}
	status := err.(apierrors.APIStatus).Status()
	var got []string
	for _, c := range status.Details.Causes {
		got = append(got, c.Field)
	}
	if fmt.Sprint(got) != fmt.Sprint(fields) {
		t.Fatalf("causes on %v, want %v: %.300s", got, fields, status.Message)
	}
	if b, _ := json.Marshal(status); len(b) > 2048 {
		t.Fatalf("a Status of %d bytes: %.300s", len(b), b)
	}
	return status
}

func TestRouteReviewInvalid(t *testing.T) {
	v := newTestView(t)
	huge := strings.Repeat("x", 1<<20)
	hostile := "/" + strings.Repeat("a", 4000) + "%zz"
	// Invalid whatever the state: 422 even before a view.
	reviewInvalid(t, v, api.RouteReviewSpec{Path: "/api/v1/pods"}, "spec.verb")
	publish(t, v, testOutput(true))
	for _, tc := range []struct {
		name   string
		spec   api.RouteReviewSpec
		fields []string
	}{
		{"no verb, no path", api.RouteReviewSpec{}, []string{"spec.verb", "spec.path"}},
		{"unknown verb", api.RouteReviewSpec{Verb: "escalate", Path: "/api/v1/pods"}, []string{"spec.verb"}},
		{"huge verb", api.RouteReviewSpec{Verb: huge, Path: "/api/v1/pods"}, []string{"spec.verb"}},
		{"relative path", api.RouteReviewSpec{Verb: "get", Path: "api/v1/pods"}, []string{"spec.path"}},
		{"huge path", api.RouteReviewSpec{Verb: "get", Path: "/" + huge}, []string{"spec.path"}},
		{"unparsable path", api.RouteReviewSpec{Verb: "get", Path: hostile}, []string{"spec.path"}},
		{"watch of nothing", api.RouteReviewSpec{Verb: "watch", Path: "/api/v1/watch"}, []string{"spec.path"}},
		{"huge source", api.RouteReviewSpec{Verb: "get", Path: "/api/v1/pods", SourcePeer: huge}, []string{"spec.sourcePeer"}},
		{"unknown source", api.RouteReviewSpec{Verb: "get", Path: "/api/v1/pods", SourcePeer: "kube-apiserver-c"}, []string{"spec.sourcePeer"}},
		{"everything", api.RouteReviewSpec{Verb: huge, Path: hostile, SourcePeer: huge}, []string{"spec.verb", "spec.path", "spec.sourcePeer"}},
	} {
		t.Run(tc.name, func(t *testing.T) { reviewInvalid(t, v, tc.spec, tc.fields...) })
	}
	// The name is bounded too.
	_, err := v.storage["routereviews"].(rest.Creater).Create(context.Background(),
		&api.RouteReview{ObjectMeta: metav1.ObjectMeta{Name: huge}, Spec: api.RouteReviewSpec{Verb: huge}}, nil, &metav1.CreateOptions{})
	if b, _ := json.Marshal(err.(apierrors.APIStatus).Status()); !apierrors.IsInvalid(err) || len(b) > 2048 {
		t.Fatalf("huge name: %.300v (%d bytes)", err, len(b))
	}
	// A bounded prefix of the hostile path, in the message and the cause.
	st := reviewInvalid(t, v, api.RouteReviewSpec{Verb: "get", Path: hostile}, "spec.path")
	if prefix := hostile[:maxEchoBytes]; strings.Count(st.Message, prefix) != 1 || !strings.Contains(st.Message, prefix+"...") || !strings.Contains(st.Message, "invalid URL escape") {
		t.Fatalf("message %q", st.Message)
	}
}

// An unknown sourcePeer is rejected, naming at most ten known peers:
// taken for a server that serves nothing, a typo would answer Proxy where
// the real answer is Local.
func TestRouteReviewUnknownSourcePeer(t *testing.T) {
	v := newTestView(t)
	out := testOutput(true)
	for i := range 10 {
		out.Peers = append(out.Peers, testPeer(fmt.Sprintf("kube-apiserver-%02d", i), true))
	}
	publish(t, v, out)
	st := reviewInvalid(t, v, api.RouteReviewSpec{Verb: "get", Path: "/api/v1/pods", SourcePeer: "kube-apiserver-a"}, "spec.sourcePeer")
	msg := st.Details.Causes[0].Message
	if !strings.Contains(msg, `"kube-apiserver-a"`) || !strings.Contains(msg, "known: a, b, kube-apiserver-00,") ||
		!strings.Contains(msg, "kube-apiserver-07 and 2 more") || strings.Contains(msg, "kube-apiserver-08") {
		t.Fatalf("message %q", msg)
	}
	// A known one is decided.
	if r, err := createReview(v, api.RouteReviewSpec{Verb: "get", Path: "/api/v1/pods", SourcePeer: "kube-apiserver-09"}); err != nil || r.Status.Decision != api.RouteProxy {
		t.Fatalf("known source: %+v %v", r, err)
	}
}

// Without routing state the answer is 503 with Retry-After and the reason,
// not a decision on nothing.
func TestRouteReviewUnavailable(t *testing.T) {
	spec := api.RouteReviewSpec{Verb: "get", Path: "/api/v1/pods"}
	unavailable := func(t *testing.T, v *testView, want string) {
		t.Helper()
		_, err := createReview(v, spec)
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("%v, want 503", err)
		}
		st := err.(apierrors.APIStatus).Status()
		if !strings.Contains(st.Message, want) || st.Details == nil || st.Details.RetryAfterSeconds <= 0 {
			t.Fatalf("503 %q (details %+v), want it to say %q with Retry-After", st.Message, st.Details, want)
		}
	}
	t.Run("no view yet", func(t *testing.T) {
		unavailable(t, newTestView(t), "no routing view computed yet")
	})
	t.Run("no peer known", func(t *testing.T) {
		v := newTestView(t)
		publish(t, v, compute.Output{})
		unavailable(t, v, "knows no kube-apiserver yet")
	})
	t.Run("decided once published", func(t *testing.T) {
		v := newTestView(t)
		publish(t, v, testOutput(true))
		if r, err := createReview(v, spec); err != nil || r.Status.Decision != api.RouteLocal {
			t.Fatalf("%+v, %v", r, err)
		}
	})
}
