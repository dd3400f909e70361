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

package plugin

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"sigs.k8s.io/peerdiscovery/pkg/adminview"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

const prefix = "/apis/peerdiscovery.k8s.io/v1alpha1/"

// fakeAPI serves the lists and RouteReviews the plugin reads; a unit-test
// stand-in for the aggregator (test/e2e runs the plugin on the real one).
func fakeAPI(t *testing.T, fail int) *httptest.Server {
	peers := v1alpha1.APIServerPeerList{Items: []v1alpha1.APIServerPeer{
		{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: v1alpha1.APIServerPeerSpec{ServerID: "old", BinaryVersion: "v1.36.3"},
			Status: v1alpha1.APIServerPeerStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: v1alpha1.APIServerPeerSpec{ServerID: "new", BinaryVersion: "v1.37.2"},
			Status: v1alpha1.APIServerPeerStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}}}},
	}}
	tables := v1alpha1.PeerRoutingTableList{Items: []v1alpha1.PeerRoutingTable{
		{Spec: v1alpha1.PeerRoutingTableSpec{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"},
			Status: v1alpha1.PeerRoutingTableStatus{Peers: []v1alpha1.RoutingPeer{{ServerID: "new"}}}},
		{Spec: v1alpha1.PeerRoutingTableSpec{Version: "v1", Resource: "pods"},
			Status: v1alpha1.PeerRoutingTableStatus{ServedByAll: true, Peers: []v1alpha1.RoutingPeer{{ServerID: "old"}, {ServerID: "new"}}}},
	}}
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if fail != 0 {
			w.WriteHeader(fail)
			_ = json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(fail),
				Reason:  map[int]metav1.StatusReason{404: metav1.StatusReasonNotFound, 403: metav1.StatusReasonForbidden, 503: metav1.StatusReasonServiceUnavailable}[fail],
				Message: "refused by the test server",
			})
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == prefix+"apiserverpeers":
			_ = json.NewEncoder(w).Encode(peers)
		case r.Method == http.MethodGet && r.URL.Path == prefix+"peerroutingtables":
			_ = json.NewEncoder(w).Encode(tables)
		case r.Method == http.MethodPost && r.URL.Path == prefix+"routereviews":
			var rr v1alpha1.RouteReview
			if err := json.NewDecoder(r.Body).Decode(&rr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if rr.Spec.SourcePeer != "old" {
				t.Errorf("review spec: %+v", rr.Spec)
			}
			// What the server checks.
			if _, err := routing.ParseReviewRequest(rr.Spec.Verb, rr.Spec.Path); err != nil {
				http.Error(w, err.Error(), http.StatusUnprocessableEntity)
				return
			}
			rr.Status = v1alpha1.RouteReviewStatus{Decision: v1alpha1.RouteProxy, Target: "new", Reason: "not served here; proxy to new",
				Candidates: []v1alpha1.RouteCandidate{{ServerID: "new", Ready: true}}}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(rr)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// kubeconfig trusts the test server's CA (or another one): verification
// stays on.
func kubeconfig(t *testing.T, s *httptest.Server, ca []byte) string {
	if ca == nil {
		ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCommand(Streams{Out: &out, ErrOut: &errOut})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestStatusAndDrain(t *testing.T) {
	s := fakeAPI(t, 0)
	kc := kubeconfig(t, s, nil)
	out, err := run(t, "status", "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SERVERS  2 known, 2 ready", "SKEW  1 of 2 GVRs are not served by every server", "storagemigration.k8s.io/v1/storageversionmigrations  -> B  local", "A  ->  B  1 GVR"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("colors on a buffer")
	}
	out, err = run(t, "status", "--kubeconfig", kc, "--color", "always")
	if err != nil || !strings.Contains(out, "\x1b[33m-> B\x1b[0m") {
		t.Errorf("--color always: %v\n%s", err, out)
	}
	out, err = run(t, "drain", "v1.37.2", "--kubeconfig", kc, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d adminview.Drain
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Unavailable) != 1 || d.Unavailable[0].GVR != "storagemigration.k8s.io/v1/storageversionmigrations" || len(d.FailOver) != 0 {
		t.Errorf("drain v1.37.2: %+v", d)
	}
	out, err = run(t, "drain", "old", "--kubeconfig", kc, "-o", "yaml")
	if err != nil || !strings.Contains(out, "unavailable: []") {
		t.Errorf("drain old: %v\n%s", err, out)
	}
	if _, err := run(t, "status", "--kubeconfig", kc, "-o", "xml"); err == nil || !strings.Contains(err.Error(), `unknown output format "xml"`) {
		t.Errorf("-o xml: %v", err)
	}
	if _, err := run(t, "drain", "nope", "--kubeconfig", kc); err == nil || !strings.Contains(err.Error(), `unknown server "nope"; known servers: old (v1.36.3), new (v1.37.2)`) {
		t.Errorf("drain nope: %v", err)
	}
}

func TestExplain(t *testing.T) {
	s := fakeAPI(t, 0)
	kc := kubeconfig(t, s, nil)
	out, err := run(t, "explain", "LIST", "/apis/storagemigration.k8s.io/v1/storageversionmigrations", "--from", "old", "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "Proxy On old (v1.36.3), list /apis/storagemigration.k8s.io/v1/storageversionmigrations is proxied to new (v1.37.2): not served here; proxy to new.\n") {
		t.Errorf("explain:\n%s", out)
	}
	// Every verb the server takes (Kubernetes verbs and HTTP methods), in
	// any case.
	for _, verb := range append(routing.ReviewVerbs(), "head", "Post", "Get") {
		if _, err := run(t, "explain", verb, "/api/v1/pods", "--from", "old", "--kubeconfig", kc); err != nil {
			t.Errorf("explain %s: %v", verb, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "frobnicate", "/api/v1/pods"}, `unknown verb "frobnicate"`},
		{[]string{"explain", "get", "api/v1/pods"}, "must start with /"},
		{[]string{"explain", "get"}, "accepts 2 arg(s)"},
		{[]string{"explain", "list", "/x", "--from", "zzz"}, `unknown server "zzz"`},
	} {
		if _, err := run(t, append(tc.args, "--kubeconfig", kc)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The errors an admin meets first say what to do.
func TestAPIErrors(t *testing.T) {
	for code, want := range map[int]string{
		http.StatusNotFound:           "this cluster does not serve peerdiscovery.k8s.io/v1alpha1",
		http.StatusForbidden:          "you may not list apiserverpeers.peerdiscovery.k8s.io",
		http.StatusServiceUnavailable: "peerdiscovery.k8s.io is installed but unavailable",
	} {
		s := fakeAPI(t, code)
		for _, args := range [][]string{{"status"}, {"drain", "x"}, {"explain", "get", "/api/v1/pods"}} {
			_, err := run(t, append(args, "--kubeconfig", kubeconfig(t, s, nil), "--request-timeout", "5s")...)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%d %v: %v, want %q", code, args, err, want)
			}
		}
	}
}

// The plugin verifies the server: a kubeconfig trusting another CA fails,
// and there is no flag to turn verification off.
func TestTLSVerified(t *testing.T) {
	s := fakeAPI(t, 0)
	// Every httptest server has the same certificate: mint another CA.
	otherCA, _, err := certutil.GenerateSelfSignedCertKey("other-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "status", "--kubeconfig", kubeconfig(t, s, otherCA), "--request-timeout", "5s")
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("wrong CA: %v", err)
	}
	if _, err := run(t, "status", "--kubeconfig", kubeconfig(t, s, nil), "--insecure-skip-tls-verify"); err == nil || !strings.Contains(err.Error(), "unknown flag") {
		t.Fatalf("--insecure-skip-tls-verify: %v", err)
	}
}
