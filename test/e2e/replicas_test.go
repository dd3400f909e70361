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
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The peerdiscovery-apiserver replicas compute independently from the API
// alone and agree on what decides a route; each issues its own
// resourceVersions, so a watch that moves to another replica gets 410 Gone
// and the informer relists there.

const replicasGroup = "replicas.e2e.peerdiscovery.test"

// replicaState is what replica i serves at its own address (not through
// the aggregator) that every replica must agree on: each PeerRoutingTable's
// spec and status, and each APIServerPeer's spec, readiness and departure.
// resourceVersions, creation times and generations are each store's own,
// and the times of a replica's own reads (lastSyncTime, the Ready
// condition's transition) are its own.
func replicaState(t *testing.T, i int) (string, error) {
	t.Helper()
	var b strings.Builder
	for _, res := range []string{"apiserverpeers", "peerroutingtables"} {
		code, _, body := planetest.Get(t, cluster.ExtensionConfig(i), "/apis/peerdiscovery.k8s.io/v1alpha1/"+res)
		if code != http.StatusOK {
			return "", fmt.Errorf("replica %d %s: %d %s", i, res, code, body)
		}
		var l struct {
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Spec   json.RawMessage `json:"spec"`
				Status struct {
					Conditions []struct {
						Type   string `json:"type"`
						Status string `json:"status"`
					} `json:"conditions,omitempty"`
					LeftTime string `json:"leftTime,omitempty"`
					// Routing tables' status, whole.
					Peers             json.RawMessage `json:"peers,omitempty"`
					TotalPeers        int             `json:"totalPeers,omitempty"`
					ServedByAll       bool            `json:"servedByAll,omitempty"`
					ClusterWide       bool            `json:"clusterWide,omitempty"`
					ClusterWideSource string          `json:"clusterWideSource,omitempty"`
				} `json:"status"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return "", err
		}
		for _, it := range l.Items {
			line, err := json.Marshal(it)
			if err != nil {
				return "", err
			}
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

// waitReplicasAgree waits until both replicas agree (replicaState).
func waitReplicasAgree(t *testing.T) string {
	t.Helper()
	var state string
	planetest.WaitFor(t, time.Minute, "both replicas serve the same routing tables and peers", func() error {
		a, err := replicaState(t, 0)
		if err != nil {
			return err
		}
		b, err := replicaState(t, 1)
		if err != nil {
			return err
		}
		if a != b {
			return fmt.Errorf("replicas differ:\n%.2000s\n---\n%.2000s", a, b)
		}
		state = a
		return nil
	})
	return state
}

func newReplicasCRD(plural string) *apiextensionsv1.CustomResourceDefinition {
	kind := strings.ToUpper(plural[:1]) + plural[1:len(plural)-1]
	return planetest.CRD(replicasGroup, plural, kind, apiextensionsv1.ClusterScoped, map[string]string{"e2e": "replicas"})
}

// TestReplicasAgree: while routing tables change, a watch resumed on the
// same replica continues, and one resumed on the other replica with the
// first one's resourceVersion gets 410 Gone, never a wrong continuation;
// relisted there, it continues. The replicas serve the same routing
// tables.
func TestReplicasAgree(t *testing.T) {
	readyPlane(t)
	waitReplicasAgree(t)
	ctx := context.Background()
	ext, err := apiextensionsclient.NewForConfig(cluster.AdminConfig(new1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e=replicas"})
	})
	list := func(replica int) string {
		l, err := planetest.Client(t, cluster.ExtensionConfig(replica)).PeerdiscoveryV1alpha1().PeerRoutingTables().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list on replica %d: %v", replica, err)
		}
		return l.ResourceVersion
	}
	// awaitTable watches on replica from rv until the routing table of a
	// CRD created meanwhile is ADDED, and returns the last resourceVersion.
	awaitTable := func(w watch.Interface, replica int, plural string) string {
		defer w.Stop()
		want := compute.RouteName(schema.GroupVersionResource{Group: replicasGroup, Version: "v1", Resource: plural})
		deadline := time.After(time.Minute)
		for {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("replica %d: watch ended before %s appeared", replica, want)
				}
				if e.Type == watch.Error {
					t.Fatalf("replica %d: %v", replica, apierrors.FromObject(e.Object))
				}
				prt, ok := e.Object.(*v1alpha1.PeerRoutingTable)
				if !ok {
					t.Fatalf("unexpected object %T", e.Object)
				}
				if e.Type == watch.Added && prt.Name == want {
					return prt.ResourceVersion
				}
			case <-deadline:
				t.Fatalf("replica %d: no ADDED %s within a minute", replica, want)
			}
		}
	}
	const rounds = 6
	rv := list(0)
	for i := 0; i < rounds; i++ {
		from, to := i%2, (i+1)%2
		c := planetest.Client(t, cluster.ExtensionConfig(to)).PeerdiscoveryV1alpha1().PeerRoutingTables()
		// Another replica's resourceVersion: 410, never a continuation.
		if w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}); err == nil {
			w.Stop()
			t.Fatalf("round %d: watch on replica %d from replica %d's resourceVersion %s was accepted, want 410", i, to, from, rv)
		} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("round %d: watch on replica %d from replica %d's resourceVersion %s: %v, want 410", i, to, from, rv, err)
		}
		// The relist: a list there, and a watch from its resourceVersion
		// sees the next change.
		w, err := c.Watch(ctx, metav1.ListOptions{ResourceVersion: list(to), AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("round %d: watch on replica %d from its own list: %v", i, to, err)
		}
		plural := fmt.Sprintf("things%02ds", i)
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, newReplicasCRD(plural), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rv = awaitTable(w, to, plural)
		// The same replica resumes its own resourceVersion.
		w, err = c.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("round %d: resuming on replica %d from its own resourceVersion %s: %v", i, to, rv, err)
		}
		plural = fmt.Sprintf("things%02dbs", i)
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, newReplicasCRD(plural), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rv = awaitTable(w, to, plural)
	}
	t.Logf("%d moves between the replicas: each got 410 for the other's resourceVersion and continued after a relist", rounds)
	waitReplicasAgree(t)
}

// relists sums peerdiscovery_filter_relists_total over every kube-apiserver.
func relists(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for i := range cluster.Servers() {
		sum += sumMetric(t, i, "peerdiscovery_filter_relists_total")
	}
	return sum
}

// TestReplicaRestartsRelist: restarting the replicas one after the other
// while the filters watch through the aggregator makes the filters relist
// from the other replica (410 for a resourceVersion it never issued) and
// keeps them routing: they stay synced, and a resource only v1.37.2 serves
// answers through v1.36.3 before and after.
func TestReplicaRestartsRelist(t *testing.T) {
	readyPlane(t)
	planetest.KeepExtensionsRunning(t, cluster)
	waitReplicasAgree(t)
	proxied := func(when string) {
		t.Helper()
		if code, _, body := planetest.Get(t, cluster.AdminConfig(old), "/apis/storagemigration.k8s.io/v1/storageversionmigrations"); code != http.StatusOK {
			t.Fatalf("%s: a v1.37-only list through v1.36.3: %d %.300s", when, code, body)
		}
	}
	proxied("before the restarts")
	before := relists(t)
	for _, i := range []int{0, 1, 0} {
		restartExtension(t, i)
		waitReplicasAgree(t)
	}
	planetest.WaitFor(t, time.Minute, "every filter synced after the restarts", func() error {
		for i := range cluster.Servers() {
			if !planetest.FilterSynced(t, cluster, i) {
				return fmt.Errorf("%s not synced", cluster.Servers()[i].Name)
			}
		}
		return nil
	})
	proxied("after the restarts")
	after := relists(t)
	if after <= before {
		t.Fatalf("the filters' relist count stayed at %v across three replica restarts: did their watches move?", before)
	}
	t.Logf("filters relisted %v times across three replica restarts and kept routing", after-before)
}
