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

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/http"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// svm is a real skew: storagemigration.k8s.io/v1 is served by v1.37.2 and
// not by v1.36.3.
var svm = schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}

const svmPath = "/apis/storagemigration.k8s.io/v1/storageversionmigrations"

func newSVM(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
		"metadata": map[string]interface{}{"name": name},
		"spec":     map[string]interface{}{"resource": map[string]interface{}{"group": "", "resource": "configmaps"}},
	}}
}

func TestVersionSkewCRUD(t *testing.T) {
	readyPlane(t)
	oldDoc, _, _ := discovery(t, old, "/apis", true)
	newDoc, _, _ := discovery(t, new1, "/apis", true)
	oldSet := planetest.GVRs(oldDoc)
	skew := map[schema.GroupVersionResource]bool{}
	for gvr := range planetest.GVRs(newDoc) {
		if !oldSet[gvr] {
			skew[gvr] = true
		}
	}
	t.Logf("GVRs served by v1.37.2 and not by v1.36.3 (%d): %v", len(skew), sortedGVRs(skew))
	if !skew[svm] {
		t.Fatalf("%s is not in the skew", svm)
	}
	ctx := context.Background()
	viaOld := planetest.Dynamic(t, cluster.AdminConfig(old)).Resource(svm)
	viaNew := planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm)
	before := rerouted(t, old, svm.Group, svm.Resource)

	w, err := viaOld.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=e2e-skew"})
	if err != nil {
		t.Fatalf("watch through v1.36.3: %v", err)
	}
	defer w.Stop()
	created, err := viaOld.Create(ctx, newSVM("e2e-skew"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create through v1.36.3: %v", err)
	}
	t.Cleanup(func() { _ = viaNew.Delete(context.Background(), "e2e-skew", metav1.DeleteOptions{}) })
	expectEvent(t, w, watch.Added, "e2e-skew")

	// Responses through the old server are the peer's own bytes.
	path := svmPath + "/e2e-skew"
	c1, _, b1 := planetest.Get(t, cluster.AdminConfig(old), path, "Accept", "application/json")
	c2, _, b2 := planetest.Get(t, cluster.AdminConfig(new1), path, "Accept", "application/json")
	if c1 != http.StatusOK || c2 != http.StatusOK || !bytes.Equal(b1, b2) {
		t.Fatalf("GET via v1.36.3 (%d) differs from direct (%d):\n%s\n%s", c1, c2, b1, b2)
	}
	list, err := viaOld.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("list through v1.36.3: %v (%d items)", err, len(list.Items))
	}
	created.SetLabels(map[string]string{"e2e": "updated"})
	if _, err := viaOld.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update through v1.36.3: %v", err)
	}
	expectEvent(t, w, watch.Modified, "e2e-skew")
	got, err := viaNew.Get(ctx, "e2e-skew", metav1.GetOptions{})
	if err != nil || got.GetLabels()["e2e"] != "updated" {
		t.Fatalf("update not visible directly: %v %v", err, got)
	}
	if err := viaOld.Delete(ctx, "e2e-skew", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete through v1.36.3: %v", err)
	}
	expectEvent(t, w, watch.Deleted, "e2e-skew")
	if after := rerouted(t, old, svm.Group, svm.Resource); after <= before {
		t.Fatalf("apiserver_rerouted_request_total did not grow on v1.36.3: %v -> %v", before, after)
	}
}

func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed before %s %s", typ, name)
			}
			if ev.Type == typ {
				if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetName() == name {
					return
				}
			}
		case <-deadline:
			t.Fatalf("no %s event for %s", typ, name)
		}
	}
}

// TestRuntimeConfigAttribution: certificates.k8s.io/v1 is off on v1.36.3.
// A CSR created through it by alice is proxied with her identity: the
// peer records spec.username = alice.
func TestRuntimeConfigAttribution(t *testing.T) {
	readyPlane(t)
	ctx := context.Background()
	admin := planetest.Kube(t, cluster.AdminConfig(new1))
	grant(t, admin, "e2e-csr-creator", "alice", rbacv1.PolicyRule{
		APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
		Verbs: []string{"create", "get", "list", "watch", "delete"},
	})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "e2e"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-attribution"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: "example.com/e2e",
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature},
		},
	}
	alice := planetest.Kube(t, cluster.UserConfig(old, "alice", nil))
	var created *certificatesv1.CertificateSigningRequest
	planetest.WaitFor(t, 30*time.Second, "alice's RBAC", func() error {
		created, err = alice.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	if created.Spec.Username != "alice" {
		t.Fatalf("CSR attributed to %q, want alice", created.Spec.Username)
	}
	path := "/apis/certificates.k8s.io/v1/certificatesigningrequests/" + csr.Name
	c1, _, b1 := planetest.Get(t, cluster.AdminConfig(old), path, "Accept", "application/json")
	c2, _, b2 := planetest.Get(t, cluster.AdminConfig(new2), path, "Accept", "application/json")
	if c1 != http.StatusOK || !bytes.Equal(b1, b2) {
		t.Fatalf("CSR via v1.36.3 (%d) differs from direct (%d)", c1, c2)
	}
}

// grant gives user rule through a ClusterRole and ClusterRoleBinding called
// name, which the test's cleanup deletes.
func grant(t *testing.T, admin kubernetes.Interface, name, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
