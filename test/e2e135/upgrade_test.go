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

package e2e135

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/discoverycheck"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// map136 is MutatingAdmissionPolicy: admissionregistration.k8s.io/v1 serves
// it from v1.36 on (measured: the only GVRs v1.36.3 serves and v1.35.4 does
// not are this resource and its bindings).
var map136 = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}

const mapPath = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"

// inertPolicy has no binding, so it mutates nothing.
func inertPolicy(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
		"metadata": map[string]interface{}{"name": name},
		"spec": map[string]interface{}{
			"matchConstraints": map[string]interface{}{"resourceRules": []interface{}{map[string]interface{}{
				"apiGroups": []interface{}{""}, "apiVersions": []interface{}{"v1"}, "operations": []interface{}{"CREATE"}, "resources": []interface{}{"configmaps"},
			}}},
			"failurePolicy": "Ignore", "reinvocationPolicy": "Never",
			"mutations": []interface{}{map[string]interface{}{
				"patchType":          "ApplyConfiguration",
				"applyConfiguration": map[string]interface{}{"expression": `Object{metadata: Object.metadata{labels: {"pd-e2e": "mutated"}}}`},
			}},
		},
	}}
}

// TestLegacyDiscoveryAndOpenAPI: through v1.35.4, which has apps/v1 and
// policy/v1 turned off and lacks the v1.36 admission policies, the legacy
// discovery endpoints and OpenAPI v3 show the whole cluster, and a
// client-go client that discovers the legacy way lists Deployments.
func TestLegacyDiscoveryAndOpenAPI(t *testing.T) {
	readyPlane(t)
	res := discoverycheck.LegacyAndOpenAPI(t, cluster, v135)
	t.Logf("through v1.35.4: %d group-versions, %d answered by peers (%d with no single capable server), %d OpenAPI documents from peers",
		res.GroupVersions, res.FromPeers, res.Split, res.OpenAPIFromPeers)
	if res.FromPeers < 3 || res.OpenAPIFromPeers < 2 {
		t.Fatalf("apps/v1, policy/v1 and admissionregistration.k8s.io/v1 must come from peers: %+v", res)
	}
	for _, path := range []string{"/apis/apps/v1", "/apis/policy/v1"} {
		if code, _, body := planetest.Get(t, cluster.AdminConfig(v135), path, "X-Kubernetes-Peer-Proxied", "true"); code != http.StatusNotFound {
			t.Fatalf("v1.35.4 serves %s itself (%d %.100s): the runtime-config this test needs is gone", path, code, body)
		}
	}
	out, err := cluster.Kubectl("--context", cluster.Servers()[v135].Context, "explain", "deployments.spec.replicas")
	if err != nil || !strings.Contains(out, "replicas") {
		t.Fatalf("kubectl explain deployments through v1.35.4: %v\n%s", err, out)
	}
}

// TestMergedDiscoveryIdentical: every server, v1.35.4 included, answers
// /apis with the same merged document (same ETag), and it lists the v1.36
// resource.
func TestMergedDiscoveryIdentical(t *testing.T) {
	readyPlane(t)
	planetest.WaitFor(t, time.Minute, "the same /apis and ETag from every server", func() error {
		code0, h0, body0 := planetest.Get(t, cluster.AdminConfig(v135), "/apis", "Accept", discovery.AcceptV2)
		if code0 != http.StatusOK || h0.Get("ETag") == "" {
			return fmt.Errorf("v1.35.4 /apis: %d, ETag %q", code0, h0.Get("ETag"))
		}
		for i := range cluster.Servers() {
			code, h, body := planetest.Get(t, cluster.AdminConfig(i), "/apis", "Accept", discovery.AcceptV2)
			if code != http.StatusOK || h.Get("ETag") != h0.Get("ETag") || !bytes.Equal(body, body0) {
				return fmt.Errorf("server %d: %d, ETag %q vs %q", i, code, h.Get("ETag"), h0.Get("ETag"))
			}
		}
		if !listsGVR(body0, map136) {
			return fmt.Errorf("merged /apis lacks %s", map136)
		}
		return nil
	})
	// Its own view (profile=nopeer) lacks it: the skew is real.
	if own, _, _ := planetest.Aggregated(t, cluster.AdminConfig(v135), "/apis", true); planetest.GVRs(own)[map136] {
		t.Fatalf("v1.35.4 serves %s itself; the skew this test needs is gone", map136)
	}
}

// listsGVR reports whether an aggregated discovery document lists gvr.
func listsGVR(body []byte, gvr schema.GroupVersionResource) bool {
	groups, err := planetest.ParseAggregated(body)
	return err == nil && planetest.GVRs(groups)[gvr]
}

// TestCRUDAndWatchThroughV135: create, get, list, update, watch and delete
// a v1.36-only resource through v1.35.4; RouteReview says why.
func TestCRUDAndWatchThroughV135(t *testing.T) {
	ids := readyPlane(t)
	ctx := context.Background()
	res := planetest.Dynamic(t, cluster.AdminConfig(v135)).Resource(map136)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list through v1.35.4: %v", err)
	}
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch through v1.35.4: %v", err)
	}
	defer w.Stop()
	created, err := res.Create(ctx, inertPolicy("pd-e2e135"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create through v1.35.4: %v", err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	got, err := res.Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil || got.GetUID() != created.GetUID() {
		t.Fatalf("get through v1.35.4: %v", err)
	}
	got.SetLabels(map[string]string{"pd-e2e": "updated"})
	if _, err := res.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update through v1.35.4: %v", err)
	}
	if err := res.Delete(ctx, created.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete through v1.35.4: %v", err)
	}
	want := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}
	for i, typ := range want {
		select {
		case e, ok := <-w.ResultChan():
			if !ok || e.Type != typ {
				t.Fatalf("watch event %d through v1.35.4: %v %v, want %s", i, ok, e.Type, typ)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no %s event through v1.35.4", typ)
		}
	}
	r := planetest.Review(t, cluster.AdminConfig(v135), "get", mapPath, ids[v135])
	if r.Decision != v1alpha1.RouteProxy || len(r.Candidates) != 2 {
		t.Fatalf("RouteReview of %s from v1.35.4: %+v, want Proxy to v1.36.3 and v1.37.2", mapPath, r)
	}
}

// TestCapableServersStopped: both capable servers stop gracefully: v1.35.4
// answers 503 (without Retry-After: they left), never 404, and RouteReview agrees; then
// they come back.
func TestCapableServersStopped(t *testing.T) {
	ids := readyPlane(t)
	planetest.KeepServersRunning(t, cluster, v136, v137)
	for _, i := range []int{v136, v137} {
		if err := cluster.StopAPIServer(i, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	saw := map[int]int{}
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		code, h, body := planetest.Get(t, cluster.AdminConfig(v135), mapPath)
		saw[code]++
		if code != http.StatusServiceUnavailable {
			t.Fatalf("GET %s through v1.35.4 with its capable servers stopped: %d %s, want 503", mapPath, code, body)
		}
		if err := planetest.Check503(h, body); err != nil {
			t.Fatalf("GET %s through v1.35.4 with its capable servers stopped: %v", mapPath, err)
		}
	}
	t.Logf("GET %s through v1.35.4 while v1.36.3 and v1.37.2 were stopped: %v", mapPath, saw)
	if r := planetest.Review(t, cluster.AdminConfig(v135), "get", mapPath, ids[v135]); r.Decision != v1alpha1.RouteUnavailable {
		t.Fatalf("RouteReview with the capable servers stopped: %+v", r)
	}
	for _, i := range []int{v136, v137} {
		if err := cluster.StartAPIServer(i); err != nil {
			t.Fatal(err)
		}
	}
	planetest.WaitFor(t, 2*time.Minute, "the v1.36 resource served through v1.35.4 again", func() error {
		if code, _, body := planetest.Get(t, cluster.AdminConfig(v135), mapPath); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}
