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

// Issue #13: the peerdiscovery-apiserver replicas agree, and survive
// restarts, because everything that decides a route is in the API and one
// elected replica publishes while the others replicate it.

const replicasGroup = "replicas.e2e.peerdiscovery.test"

// replicaState is what replica i serves at its own address (not through
// the aggregator): every APIServerPeer and PeerRoutingTable, as JSON,
// resourceVersions included.
func replicaState(t *testing.T, i int) (string, error) {
	t.Helper()
	var b strings.Builder
	for _, res := range []string{"apiserverpeers", "peerroutingtables"} {
		code, _, body := planetest.Get(t, cluster.ExtensionConfig(i), "/apis/peerdiscovery.k8s.io/v1alpha1/"+res)
		if code != http.StatusOK {
			return "", fmt.Errorf("replica %d %s: %d %s", i, res, code, body)
		}
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return "", err
		}
		for _, it := range l.Items {
			b.Write(it)
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

// waitReplicasAgree waits until both replicas serve identical objects.
func waitReplicasAgree(t *testing.T) string {
	t.Helper()
	var state string
	planetest.WaitFor(t, time.Minute, "both replicas serve identical APIServerPeers and PeerRoutingTables (resourceVersions included)", func() error {
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

// TestReplicasAgree: watches resumed alternately on each replica's own
// address with the last resourceVersion seen continue without 410 while
// routing tables change, and the replicas serve identical objects.
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
	code, _, body := planetest.Get(t, cluster.ExtensionConfig(0), "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables")
	if code != http.StatusOK {
		t.Fatalf("list on replica 0: %d %s", code, body)
	}
	var list v1alpha1.PeerRoutingTableList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	const resumes = 20
	for i := 0; i < resumes; i++ {
		replica := i % 2
		w, err := planetest.Client(t, cluster.ExtensionConfig(replica)).PeerdiscoveryV1alpha1().PeerRoutingTables().Watch(ctx,
			metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("resume %d on replica %d from %s: %v (410 means the replicas do not share resourceVersions)", i, replica, rv, err)
		}
		// A change while this watch runs: a new CRD, so a new routing table.
		plural := fmt.Sprintf("things%02ds", i)
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, newReplicasCRD(plural), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := compute.RouteName(schema.GroupVersionResource{Group: replicasGroup, Version: "v1", Resource: plural})
		deadline := time.After(time.Minute)
		for seen := false; !seen; {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("resume %d on replica %d: watch ended before %s appeared", i, replica, want)
				}
				if e.Type == watch.Error {
					t.Fatalf("resume %d on replica %d: %v", i, replica, apierrors.FromObject(e.Object))
				}
				prt, ok := e.Object.(*v1alpha1.PeerRoutingTable)
				if !ok {
					t.Fatalf("unexpected object %T", e.Object)
				}
				rv = prt.ResourceVersion
				seen = e.Type == watch.Added && prt.Name == want
			case <-deadline:
				t.Fatalf("resume %d on replica %d: no ADDED %s within a minute", i, replica, want)
			}
		}
		w.Stop()
	}
	t.Logf("%d watches resumed alternately on both replicas, last resourceVersion %s: no 410", resumes, rv)
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

// TestReplicaRestartsNoRelist: restarting the replicas one after the other
// (the leader among them) while the filters watch through the aggregator
// makes no filter relist: every watch resumes on the other replica.
func TestReplicaRestartsNoRelist(t *testing.T) {
	readyPlane(t)
	planetest.KeepExtensionsRunning(t, cluster)
	waitReplicasAgree(t)
	// An earlier test may have restarted every replica at once (a new
	// timeline): the filters' relists after it may still be in their
	// backoff. Start counting once the count held still for 15 s.
	var before float64
	last, since := relists(t), time.Now()
	planetest.WaitFor(t, 2*time.Minute, "the filters' relist count steady", func() error {
		if n := relists(t); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) < 15*time.Second {
			return fmt.Errorf("relists %v, changed %s ago", last, time.Since(since).Round(time.Second))
		}
		before = last
		return nil
	})
	for _, i := range []int{0, 1, 0} {
		restartExtension(t, i)
		waitReplicasAgree(t)
	}
	// Give every filter watch that ended time to resume.
	time.Sleep(5 * time.Second)
	if after := relists(t); after != before {
		t.Fatalf("the filters relisted %v times while the replicas restarted one at a time", after-before)
	}
	t.Logf("filters' relists unchanged (%v) across three replica restarts", before)
}
