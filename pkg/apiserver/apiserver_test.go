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

package apiserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	clocktesting "k8s.io/utils/clock/testing"

	"sigs.k8s.io/peerdiscovery/pkg/compute"
	generatedopenapi "sigs.k8s.io/peerdiscovery/pkg/generated/openapi"
)

// newTestServer builds the server without the engine (the test publishes)
// and without authentication or authorization, and prepares it to serve
// through its handler.
func newTestServer(t *testing.T, extra ExtraConfig) *Server {
	t.Helper()
	generic := genericapiserver.NewRecommendedConfig(Codecs)
	generic.Serializer = NegotiatedSerializer
	generic.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("1.37", "", "")
	generic.ExternalAddress = "127.0.0.1:6443"
	generic.LoopbackClientConfig = &rest.Config{Host: "https://127.0.0.1:6443"}
	// The storages need the models for managed fields.
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, openapi.NewDefinitionNamer(Scheme))
	cfg := &Config{GenericConfig: generic, ExtraConfig: extra}
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	srv.GenericAPIServer.PrepareRun()
	t.Cleanup(func() {
		srv.Stores.Stop()
		srv.GenericAPIServer.Destroy()
	})
	return srv
}

func serve(t *testing.T, srv *Server, path string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	srv.GenericAPIServer.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w.Code, w.Body.String()
}

func TestCompleteDefaults(t *testing.T) {
	generic := genericapiserver.NewRecommendedConfig(Codecs)
	generic.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("1.37", "", "")
	generic.ExternalAddress = "127.0.0.1:6443"
	cfg := &Config{GenericConfig: generic}
	c := cfg.Complete()
	if c.ExtraConfig.StaleAfter != DefaultStaleAfter || c.ExtraConfig.Clock == nil {
		t.Fatalf("defaults: stale after %s, clock %v", c.ExtraConfig.StaleAfter, c.ExtraConfig.Clock)
	}
}

// TestNewInstallsTheGroup: New serves the group's four resources with
// exactly the verbs their storages implement.
func TestNewInstallsTheGroup(t *testing.T) {
	srv := newTestServer(t, ExtraConfig{})
	code, body := serve(t, srv, "/apis/peerdiscovery.k8s.io/v1alpha1")
	if code != http.StatusOK {
		t.Fatalf("discovery: %d %s", code, body)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range list.APIResources {
		verbs := slices.Clone([]string(r.Verbs))
		slices.Sort(verbs)
		got[r.Name] = strings.Join(verbs, ",")
		if r.Namespaced {
			t.Errorf("%s is namespaced", r.Name)
		}
	}
	want := map[string]string{
		"apiserverpeers":            "get,list,watch",
		"peeraggregateddiscoveries": "get,list,watch",
		"peerroutingtables":         "get,list,watch",
		"routereviews":              "create",
	}
	if len(got) != len(want) {
		t.Fatalf("resources %v, want %v", got, want)
	}
	for r, verbs := range want {
		if got[r] != verbs {
			t.Errorf("%s: verbs %q, want %q", r, got[r], verbs)
		}
	}
}

// TestReadinessFollowsTheView: /readyz fails until a view is published and
// again once it is older than StaleAfter.
func TestReadinessFollowsTheView(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	srv := newTestServer(t, ExtraConfig{StaleAfter: time.Minute, Clock: clk})
	check := "/readyz/peerdiscovery-view"
	if code, body := serve(t, srv, check); code == http.StatusOK || !strings.Contains(body, "no view computed yet") {
		t.Fatalf("before a view: %d %s", code, body)
	}
	if err := srv.Publisher.Publish(compute.Output{}); err != nil {
		t.Fatal(err)
	}
	if code, body := serve(t, srv, check); code != http.StatusOK {
		t.Fatalf("fresh view: %d %s", code, body)
	}
	clk.SetTime(clk.Now().Add(time.Minute + time.Second))
	if code, body := serve(t, srv, check); code == http.StatusOK || !strings.Contains(body, "view is stale") {
		t.Fatalf("view older than StaleAfter: %d %s", code, body)
	}
}
