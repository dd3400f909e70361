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

package localcluster

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The readiness wait accepts only what kubectl can use: the group's
// version listed fresh and with resources in aggregated discovery. The
// stale entry without resources is what kube-aggregator lists after a
// failed fetch while the extension rolls out; kubectl then says "the
// server doesn't have a resource type" (CI on 5a95c03, TestReadmeExamples).
func TestAggregatedDiscoveryLists(t *testing.T) {
	routes := apidiscoveryv2.APIResourceDiscovery{Resource: "peerroutingtables", Scope: apidiscoveryv2.ScopeCluster}
	for _, tc := range []struct {
		name    string
		version apidiscoveryv2.APIVersionDiscovery
		other   bool // the group is not listed, another one is
		wantErr string
	}{
		{name: "fresh with resources", version: apidiscoveryv2.APIVersionDiscovery{Version: apiVersion, Resources: []apidiscoveryv2.APIResourceDiscovery{routes}, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}},
		{name: "freshness left out", version: apidiscoveryv2.APIVersionDiscovery{Version: apiVersion, Resources: []apidiscoveryv2.APIResourceDiscovery{routes}}},
		{name: "stale after a failed fetch", version: apidiscoveryv2.APIVersionDiscovery{Version: apiVersion, Freshness: apidiscoveryv2.DiscoveryFreshnessStale}, wantErr: "listed as Stale"},
		{name: "no resources", version: apidiscoveryv2.APIVersionDiscovery{Version: apiVersion}, wantErr: "without resources"},
		{name: "another version only", version: apidiscoveryv2.APIVersionDiscovery{Version: "v1beta1", Resources: []apidiscoveryv2.APIResourceDiscovery{routes}}, wantErr: "not listed"},
		{name: "group not listed", other: true, version: apidiscoveryv2.APIVersionDiscovery{Version: apiVersion, Resources: []apidiscoveryv2.APIResourceDiscovery{routes}}, wantErr: "not listed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := apiGroup
			if tc.other {
				name = "example.com"
			}
			list := apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Versions:   []apidiscoveryv2.APIVersionDiscovery{tc.version},
			}}}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// A real server answers without this Accept with the
				// legacy APIGroupList, which lists no resources.
				if r.URL.Path != "/apis" || r.Header.Get("Accept") != discovery.AcceptV2 {
					http.Error(w, "want GET /apis for aggregated discovery", http.StatusNotAcceptable)
					return
				}
				w.Header().Set("Content-Type", discovery.AcceptV2)
				_ = json.NewEncoder(w).Encode(list)
			}))
			defer srv.Close()
			cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			err = aggregatedDiscoveryLists(context.Background(), cs, apiGroup, apiVersion)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("got %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
