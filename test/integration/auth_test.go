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
	"net/http"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

func TestAuthnAuthz(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	if err := ts.srv.Publisher.Publish(view(1, true)); err != nil {
		t.Fatal(err)
	}
	// Unauthenticated: no credentials, or a token nobody issued.
	if _, err := ts.clientset(t, ts.anonymous()).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("anonymous list: %v, want 401", err)
	}
	bad := ts.anonymous()
	bad.BearerToken = "not-a-token"
	if _, err := ts.clientset(t, bad).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("bad token list: %v, want 401", err)
	}
	// Authenticated without the reader role: 403.
	if _, err := ts.clientset(t, ts.config("nobody")).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list without RBAC: %v, want 403", err)
	}
	// With the reader role from artifacts/ (applied to the real cluster): allowed.
	if out, err := cluster.Kubectl("apply", "-f", repoPath("artifacts/deploy/base/rbac.yaml")); err != nil {
		// The namespaced parts need the namespace.
		if _, err2 := cluster.Kubectl("apply", "-f", repoPath("artifacts/deploy/base/namespace.yaml")); err2 != nil {
			t.Fatalf("applying rbac.yaml: %v: %s", err, out)
		}
		if out, err = cluster.Kubectl("apply", "-f", repoPath("artifacts/deploy/base/rbac.yaml")); err != nil {
			t.Fatalf("applying rbac.yaml: %v: %s", err, out)
		}
	}
	kube, err := kubernetes.NewForConfig(cluster.AdminConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "integration-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "peerdiscovery-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "reader"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	reader := ts.clientset(t, ts.config("reader")).PeerdiscoveryV1alpha1()
	planetest.WaitFor(t, 30*time.Second, "reader allowed", func() error {
		_, err := reader.PeerRoutingTables().List(ctx, metav1.ListOptions{})
		return err
	})
	review, err := reader.RouteReviews().Create(ctx, &v1alpha1.RouteReview{Spec: v1alpha1.RouteReviewSpec{
		Verb: "get", Path: "/apis/resource.k8s.io/v1beta2/deviceclasses", SourcePeer: "kube-apiserver-b",
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if review.Status.Decision != v1alpha1.RouteProxy || review.Status.Target != "kube-apiserver-a" || review.Status.Reason == "" {
		t.Fatalf("route review: %+v", review.Status)
	}
	// The reader cannot write routing state: authorization refuses it
	// before any handler (an admin gets 405, see TestListGetWatchSelectors).
	if err := reader.RESTClient().Delete().Resource("peerroutingtables").Name("deployments.v1.apps").Do(ctx).Error(); !apierrors.IsForbidden(err) {
		t.Fatalf("reader delete of a routing table: %v, want 403 Forbidden", err)
	}
	// Health endpoints stay open to probes.
	if code, body := ts.get(t, ts.anonymous(), "/livez"); code != http.StatusOK {
		t.Fatalf("anonymous livez: %d %s", code, body)
	}
}
