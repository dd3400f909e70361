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
	"net/http"
	"testing"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

func TestRouteReview(t *testing.T) {
	ids := readyPlane(t)
	r := review(t, new1, "get", svmPath, ids[old])
	if r.Decision != v1alpha1.RouteProxy || (r.Target != ids[new1] && r.Target != ids[new2]) {
		t.Fatalf("svm from v1.36.3: %+v", r)
	}
	if r := review(t, new1, "list", svmPath, ids[new1]); r.Decision != v1alpha1.RouteLocal {
		t.Fatalf("svm from v1.37.2: %+v", r)
	}
	if r := review(t, old, "create", "/apis/certificates.k8s.io/v1/certificatesigningrequests", ids[old]); r.Decision != v1alpha1.RouteProxy {
		t.Fatalf("csr from v1.36.3: %+v", r)
	}
	if r := review(t, old, "get", "/api/v1/namespaces/default/pods", ids[old]); r.Decision != v1alpha1.RouteLocal {
		t.Fatalf("pods: %+v", r)
	}
	if r := review(t, old, "get", "/apis/nothing.example.com/v1/things", ids[old]); r.Decision != v1alpha1.RouteNotFound {
		t.Fatalf("unknown: %+v", r)
	}
	if r := review(t, old, "get", "/healthz", ids[old]); r.Decision != v1alpha1.RouteLocal {
		t.Fatalf("non-resource: %+v", r)
	}
	// What really happened matches: the proxied request succeeded, the
	// unknown one is a 404 from the local chain.
	if code, _, body := planetest.Get(t, cluster.AdminConfig(old), svmPath); code != http.StatusOK {
		t.Fatalf("svm via v1.36.3: %d %s", code, body)
	}
	if code, _, _ := planetest.Get(t, cluster.AdminConfig(old), "/apis/nothing.example.com/v1/things"); code != http.StatusNotFound {
		t.Fatalf("unknown via v1.36.3: %d, want 404", code)
	}
}
