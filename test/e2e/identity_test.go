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
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/filter"
	"sigs.k8s.io/peerdiscovery/test/hostileheaders"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestSecurity: a user without the reader role is refused peerdiscovery.k8s.io
// on every server, and identity or loop headers a client sends change
// nothing: bob stays bob, through the proxy too, for reads and writes.
func TestSecurity(t *testing.T) {
	readyPlane(t)
	ctx := context.Background()
	for i := range cluster.Servers() {
		_, err := planetest.Client(t, cluster.UserConfig(i, "nobody", nil)).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("server %d: user without the reader role: %v, want 403", i, err)
		}
	}
	bob := cluster.UserConfig(old, "bob", nil)
	for _, h := range [][]string{
		nil,
		{"X-Remote-User", "system:admin", "X-Remote-Group", "system:masters"},
		{"X-Kubernetes-Peer-Proxied", "true"},
		{"X-Remote-User", "system:admin", "X-Remote-Group", "system:masters", "X-Kubernetes-Peer-Proxied", "true"},
	} {
		code, _, body := planetest.Get(t, bob, svmPath, h...)
		if code != http.StatusForbidden {
			t.Fatalf("bob with headers %v: %d %s, want 403", h, code, body)
		}
	}
	// Writes too: client identity headers never reach the peer.
	code, _, body := planetest.Do(t, bob, http.MethodPost, svmPath, strings.NewReader(`{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"name":"e2e-bob"},"spec":{"resource":{"group":"","resource":"configmaps"}}}`),
		"Content-Type", "application/json", "X-Remote-User", "system:admin", "X-Remote-Group", "system:masters")
	if code != http.StatusForbidden {
		t.Fatalf("bob POST with forged identity headers: %d %s, want 403", code, body)
	}
}

// identity is a service account whose token the identity test sends with
// (a real authenticator: name, UID, groups and extra all set), and the one
// admission policy that denies it (none for the control).
type identity struct {
	ns, name string
	policy   string // the ValidatingAdmissionPolicy that denies it
	token    string
	user     authenticationv1.UserInfo // as the API server sees it
}

const credentialIDKey = "authentication.kubernetes.io/credential-id"

// TestProxyHopIdentity: through v1.36.3 (which does not serve
// StorageVersionMigrations, so every request is proxied), over HTTP/1.1 and
// HTTP/2, with every hostile header set, admission policies on the peers
// that deny by username, by group, by UID and by an extra value deny every
// time, the control identity is admitted, and the audit logs of the source
// and the peer hold the same Audit-ID with the source's proxied-to
// annotation.
func TestProxyHopIdentity(t *testing.T) {
	ids := readyPlane(t)
	ctx := context.Background()
	admin := planetest.Kube(t, cluster.AdminConfig(new1))
	idents := []*identity{
		{ns: "pd-identity", name: "by-name", policy: "pd-deny-name"},
		{ns: "pd-contractors", name: "by-group", policy: "pd-deny-group"},
		{ns: "pd-identity", name: "by-uid", policy: "pd-deny-uid"},
		{ns: "pd-identity", name: "by-extra", policy: "pd-deny-extra"},
		{ns: "pd-identity", name: "allowed"},
	}
	setUpIdentities(t, admin, idents)
	byName := map[string]*identity{}
	for _, id := range idents {
		byName[id.name] = id
	}
	jti := byName["by-extra"].user.Extra[credentialIDKey]
	if len(jti) != 1 || byName["by-uid"].user.UID == "" {
		t.Fatalf("service account users lack a UID or a credential ID: %+v", byName)
	}
	policies := map[string]string{
		"pd-deny-name":  fmt.Sprintf("request.userInfo.username != %q", byName["by-name"].user.Username),
		"pd-deny-group": `!("system:serviceaccounts:pd-contractors" in request.userInfo.groups)`,
		"pd-deny-uid":   fmt.Sprintf("request.userInfo.uid != %q", byName["by-uid"].user.UID),
		"pd-deny-extra": fmt.Sprintf("!(%q in request.userInfo.extra) || !(%q in request.userInfo.extra[%q])", credentialIDKey, jti[0], credentialIDKey),
	}
	for name, expr := range policies {
		createDenyPolicy(t, admin, name, expr)
	}
	t.Cleanup(func() {
		for name := range policies {
			_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
			_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	// The policies are in force on both capable servers before the table.
	for _, i := range []int{new1, new2} {
		for _, id := range idents {
			planetest.WaitFor(t, time.Minute, fmt.Sprintf("%s's policy on server %d", id.name, i), func() error {
				code, _, body := createSVM(t, cluster.Servers()[i].Endpoint, id.token, true, nil)
				return expectOutcome(id, code, body)
			})
		}
	}

	sets := hostileheaders.Sets(credentialIDKey)
	source := cluster.Servers()[old].Endpoint
	type sent struct {
		id      *identity
		auditID string
		code    int
	}
	var denied []sent
	requests := 0
	for _, http1 := range []bool{true, false} {
		proto := map[bool]string{true: "HTTP/1.1", false: "HTTP/2"}[http1]
		for _, set := range sets {
			if set.HTTP1Only && !http1 {
				continue
			}
			for _, id := range idents {
				code, h, body := createSVM(t, source, id.token, http1, set.Header)
				requests++
				if set.Impersonates {
					// The first server refuses the impersonation itself.
					if code < 400 {
						t.Fatalf("%s, %s, %s: %d %s, want a refusal", proto, set.Name, id.name, code, body)
					}
					continue
				}
				if err := expectOutcome(id, code, body); err != nil {
					t.Fatalf("%s, header set %q %v, identity %s: %v", proto, set.Name, set.Header, id.name, err)
				}
				if id.policy != "" {
					denied = append(denied, sent{id: id, auditID: h.Get("Audit-Id"), code: code})
				}
			}
		}
	}
	t.Logf("%d requests through v1.36.3 with %d header sets (HTTP/1.1 and HTTP/2): every policy denied every time; the control was admitted", requests, len(sets))

	// The audit logs: the source's event names the peer it proxied to; that
	// peer's event has the same Audit-ID and the identity.
	planetest.WaitFor(t, 30*time.Second, "audit events for every denied request", func() error {
		src := readAudit(t, cluster.AuditLogPath(old))
		peers := map[string]map[string]auditEvent{}
		for _, i := range []int{new1, new2} {
			peers[ids[i]] = readAudit(t, cluster.AuditLogPath(i))
		}
		for _, d := range denied {
			ev, ok := src[d.auditID]
			if !ok {
				return fmt.Errorf("source has no audit event %s", d.auditID)
			}
			to := ev.Annotations[filter.AuditProxiedTo]
			if to != ids[new1] && to != ids[new2] {
				return fmt.Errorf("source event %s: proxied-to %q, want a v1.37.2 server (annotations %v)", d.auditID, to, ev.Annotations)
			}
			if ev.User.Username != d.id.user.Username {
				return fmt.Errorf("source event %s: user %q", d.auditID, ev.User.Username)
			}
			pev, ok := peers[to][d.auditID]
			if !ok {
				return fmt.Errorf("peer %s has no audit event %s", to, d.auditID)
			}
			if pev.User.Username != d.id.user.Username || pev.User.UID != d.id.user.UID || pev.ResponseStatus.Code != int32(d.code) {
				return fmt.Errorf("peer event %s: user %+v code %d; want %s/%s code %d", d.auditID, pev.User, pev.ResponseStatus.Code, d.id.user.Username, d.id.user.UID, d.code)
			}
		}
		return nil
	})
	t.Logf("audit: %d denied requests found in the source's and the peer's logs under one Audit-ID", len(denied))
}

// expectOutcome: a denied identity gets 403 from its own policy; the
// control is created (dry run).
func expectOutcome(id *identity, code int, body []byte) error {
	if id.policy == "" {
		if code != http.StatusCreated {
			return fmt.Errorf("control identity: %d %.300s, want 201", code, body)
		}
		return nil
	}
	if code != http.StatusForbidden || !strings.Contains(string(body), id.policy) {
		return fmt.Errorf("%d %.300s, want 403 from %s", code, body, id.policy)
	}
	return nil
}

// createSVM POSTs a StorageVersionMigration (dry run) to endpoint with a
// bearer token, over HTTP/1.1 or HTTP/2, with extra headers.
func createSVM(t *testing.T, endpoint, token string, http1 bool, extra http.Header) (int, http.Header, []byte) {
	t.Helper()
	cfg := &rest.Config{Host: endpoint, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cluster.CACertPEM()}}
	if http1 {
		cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	body := `{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"generateName":"pd-identity-"},"spec":{"resource":{"group":"","resource":"configmaps"}}}`
	req, err := http.NewRequest(http.MethodPost, endpoint+svmPath+"?dryRun=All", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST via %s: %v", endpoint, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := resp.Proto; http1 && got != "HTTP/1.1" || !http1 && got != "HTTP/2.0" {
		t.Fatalf("spoke %s", got)
	}
	return resp.StatusCode, resp.Header, b
}

// setUpIdentities creates the namespaces, service accounts, a role to
// create StorageVersionMigrations, and a token per identity, and learns
// each user as the API server sees it (SelfSubjectReview). The test's
// cleanup deletes them, and waits for the namespaces to be gone so that
// the test can run again.
func setUpIdentities(t *testing.T, admin kubernetes.Interface, idents []*identity) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, "pd-identity-svm-creator", metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(ctx, "pd-identity-svm-creator", metav1.DeleteOptions{})
		namespaces := map[string]bool{}
		for _, id := range idents {
			namespaces[id.ns] = true
		}
		for ns := range namespaces {
			_ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		}
		for ns := range namespaces {
			planetest.WaitFor(t, 2*time.Minute, "namespace "+ns+" deleted", func() error {
				if _, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("still there: %v", err)
				}
				return nil
			})
		}
	})
	ignoreExists := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "pd-identity-svm-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"storagemigration.k8s.io"}, Resources: []string{"storageversionmigrations"}, Verbs: []string{"create"}}},
	}
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	ignoreExists(err)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pd-identity-svm-creator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}
	for _, id := range idents {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: id.ns}}, metav1.CreateOptions{})
		ignoreExists(err)
		_, err = admin.CoreV1().ServiceAccounts(id.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: id.name}}, metav1.CreateOptions{})
		ignoreExists(err)
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: id.ns, Name: id.name})
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	ignoreExists(err)
	for _, id := range idents {
		var tr *authenticationv1.TokenRequest
		planetest.WaitFor(t, 30*time.Second, "a token for "+id.name, func() (err error) {
			expiry := int64(3600)
			tr, err = admin.CoreV1().ServiceAccounts(id.ns).CreateToken(ctx, id.name, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
			}, metav1.CreateOptions{})
			return err
		})
		id.token = tr.Status.Token
		cfg := &rest.Config{Host: cluster.Servers()[new1].Endpoint, BearerToken: id.token, TLSClientConfig: rest.TLSClientConfig{CAData: cluster.CACertPEM()}}
		ssr, err := planetest.Kube(t, cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectReview as %s: %v", id.name, err)
		}
		id.user = ssr.Status.UserInfo
	}
}

// createDenyPolicy creates a ValidatingAdmissionPolicy that denies creating
// StorageVersionMigrations unless expr holds, and its binding.
func createDenyPolicy(t *testing.T, admin kubernetes.Interface, name, expr string) {
	t.Helper()
	ctx := context.Background()
	fail := admissionregistrationv1.Fail
	forbidden := metav1.StatusReasonForbidden
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"storagemigration.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"storageversionmigrations"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: expr, Message: "denied by " + name, Reason: &forbidden}},
		},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
