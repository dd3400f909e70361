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
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestCRDServedLocallyAndNotResurrected: a CRD, which every server serves
// from the shared storage, is never proxied; deleted, it leaves merged
// discovery and does not come back.
func TestCRDServedLocallyAndNotResurrected(t *testing.T) {
	ids := readyPlane(t)
	ctx := context.Background()
	ext, err := apiextensionsclient.NewForConfig(cluster.AdminConfig(new1))
	if err != nil {
		t.Fatal(err)
	}
	crd := planetest.CRD("e2e.peerdiscovery.test", "widgets", "Widget", apiextensionsv1.NamespaceScoped, nil)
	created := time.Now()
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	gvr := schema.GroupVersionResource{Group: "e2e.peerdiscovery.test", Version: "v1", Resource: "widgets"}
	path := "/apis/e2e.peerdiscovery.test/v1/namespaces/default/widgets"
	before := rerouted(t, old, gvr.Group, gvr.Resource)
	widget := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "e2e.peerdiscovery.test/v1", "kind": "Widget", "metadata": map[string]interface{}{"name": "w1"}}}
	planetest.WaitFor(t, time.Minute, "the CRD served through every server", func() error {
		for i := range cluster.Servers() {
			if _, err := planetest.Dynamic(t, cluster.AdminConfig(i)).Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil {
				return fmt.Errorf("server %d: %v", i, err)
			}
		}
		return nil
	})
	inMerged := func() bool {
		pad, err := pd(t, new1).PeerdiscoveryV1alpha1().PeerAggregatedDiscoveries().Get(ctx, v1alpha1.PeerAggregatedDiscoveryName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return planetest.GVRs(pad.Status.APIs.Items)[gvr]
	}
	appeared := mergedStaleness(t, "the new CRD in merged discovery", created, inMerged)
	if _, err := planetest.Dynamic(t, cluster.AdminConfig(old)).Resource(gvr).Namespace("default").Create(ctx, widget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, time.Minute, "RouteReview: the CRD is local everywhere", func() error {
		if r := review(t, new1, "get", path, ids[old]); r.Decision != v1alpha1.RouteLocal {
			return fmt.Errorf("%+v", r)
		}
		return nil
	})
	if after := rerouted(t, old, gvr.Group, gvr.Resource); after != before {
		t.Fatalf("a CRD request was proxied: %v -> %v", before, after)
	}

	deleted := time.Now()
	if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	left := mergedStaleness(t, "the deleted CRD out of merged discovery", deleted, func() bool { return !inMerged() })
	t.Logf("merged discovery behind a CRD: %v after its creation, %v after its deletion (bound %v)", appeared.Round(10*time.Millisecond), left.Round(10*time.Millisecond), mergedStalenessBound)
	// It never comes back: watch several refresh intervals.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if inMerged() {
			t.Fatal("the deleted CRD's GVR came back in merged discovery")
		}
	}
}

// mergedStalenessBound is how far merged discovery may lag a CRD change
// (#48): the engine's default --refresh-interval, within which a replica
// that read every server on every refresh (before the readiness heartbeat)
// showed it. Change-driven reads must keep it, whatever the safety poll.
const mergedStalenessBound = 10 * time.Second

// mergedStaleness waits until done holds and returns how long after since
// that was; past mergedStalenessBound the test fails (it waits a minute
// before giving up, to report the figure).
func mergedStaleness(t *testing.T, what string, since time.Time, done func() bool) time.Duration {
	t.Helper()
	var took time.Duration
	planetest.WaitFor(t, time.Minute, what, func() error {
		if !done() {
			return fmt.Errorf("not yet")
		}
		took = time.Since(since)
		return nil
	})
	if took > mergedStalenessBound {
		t.Errorf("%s %v after the change, over the %v bound", what, took.Round(10*time.Millisecond), mergedStalenessBound)
	}
	return took
}
