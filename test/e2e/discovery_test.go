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
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientdiscovery "k8s.io/client-go/discovery"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

func TestMergedDiscovery(t *testing.T) {
	readyPlane(t)
	// Every kube-apiserver carries the filter: its post-start hook and
	// readyz check are there, and its caches are synced.
	for i := range cluster.Servers() {
		code, _, body := planetest.Get(t, cluster.AdminConfig(i), "/readyz?verbose")
		if code != http.StatusOK || !strings.Contains(string(body), "[+]peerdiscovery-filter ok") ||
			!strings.Contains(string(body), "[+]poststarthook/peerdiscovery-filter ok") {
			t.Fatalf("server %d readyz: %d\n%s", i, code, body)
		}
		planetest.WaitFor(t, time.Minute, "filter caches synced", func() error {
			if !planetest.FilterSynced(t, cluster, i) {
				return fmt.Errorf("server %d not synced", i)
			}
			return nil
		})
	}
	union := map[schema.GroupVersionResource]bool{}
	for i := range cluster.Servers() {
		groups, _, _ := discovery(t, i, "/apis", true)
		for gvr := range planetest.GVRs(groups) {
			union[gvr] = true
		}
	}
	planetest.WaitFor(t, time.Minute, "merged discovery equals the union of every server's nopeer view", func() error {
		out, err := cluster.Kubectl("get", "--raw", "/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries/cluster")
		if err != nil {
			return err
		}
		var pad v1alpha1.PeerAggregatedDiscovery
		if err := json.Unmarshal([]byte(out), &pad); err != nil {
			return err
		}
		got := planetest.GVRs(pad.Status.APIs.Items)
		if fmt.Sprint(sortedGVRs(got)) != fmt.Sprint(sortedGVRs(union)) {
			return fmt.Errorf("merged has %d GVRs, union %d", len(got), len(union))
		}
		return nil
	})
	planetest.WaitFor(t, time.Minute, "every server answers /apis with the same document and ETag", func() error {
		_, etag0, body0 := discovery(t, 0, "/apis", false)
		if etag0 == "" {
			return fmt.Errorf("server 0: no ETag")
		}
		for i := 1; i < len(cluster.Servers()); i++ {
			_, etag, body := discovery(t, i, "/apis", false)
			if etag != etag0 || !bytes.Equal(body, body0) {
				return fmt.Errorf("server %d: ETag %s vs %s, same body %v", i, etag, etag0, bytes.Equal(body, body0))
			}
		}
		// And a 304 for the current ETag.
		code, _, _ := planetest.Get(t, cluster.AdminConfig(0), "/apis", "Accept", clientdiscovery.AcceptV2, "If-None-Match", etag0)
		if code != http.StatusNotModified {
			return fmt.Errorf("If-None-Match: %d, want 304", code)
		}
		return nil
	})
	groups, _, _ := discovery(t, old, "/apis", false)
	if !planetest.GVRs(groups)[svm] {
		t.Fatalf("the v1.36.3 server's /apis does not list %s", svm)
	}
}

func TestKubectlColumnsAndSelectors(t *testing.T) {
	readyPlane(t)
	ctxOld := cluster.Servers()[old].Context
	out, err := cluster.Kubectl("--context", ctxOld, "get", "peerroutingtables")
	if err != nil {
		t.Fatal(err)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME GROUP VERSION RESOURCE READY SERVED-BY-ALL CLUSTER-WIDE AGE" {
		t.Fatalf("peerroutingtables columns: %v", header)
	}
	out, err = cluster.Kubectl("--context", ctxOld, "get", "apiserverpeers")
	if err != nil {
		t.Fatal(err)
	}
	header = strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME ENDPOINT VERSION READY GVRS LAST-SYNC AGE" {
		t.Fatalf("apiserverpeers columns: %v", header)
	}
	if out, err = cluster.Kubectl("--context", ctxOld, "get", "peerdiscovery"); err != nil || !strings.Contains(out, "peerroutingtable.peerdiscovery.k8s.io/") {
		t.Fatalf("kubectl get peerdiscovery (category): %v\n%.500s", err, out)
	}
	if out, err = cluster.Kubectl("--context", ctxOld, "explain", "peerroutingtables.status.servedByAll"); err != nil || !strings.Contains(out, "servedByAll") {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}

	// The field selector lists exactly the GVRs not served by every peer.
	var sets []map[schema.GroupVersionResource]bool
	for i := range cluster.Servers() {
		api, _, _ := discovery(t, i, "/api", true)
		apis, _, _ := discovery(t, i, "/apis", true)
		s := planetest.GVRs(apis)
		for gvr := range planetest.GVRs(api) {
			s[gvr] = true
		}
		sets = append(sets, s)
	}
	want := map[string]bool{}
	for gvr := range sets[0] {
		for _, s := range sets[1:] {
			if !s[gvr] {
				want[compute.RouteName(gvr)] = true
			}
		}
	}
	for _, s := range sets[1:] {
		for gvr := range s {
			if !sets[0][gvr] {
				want[compute.RouteName(gvr)] = true
			}
		}
	}
	planetest.WaitFor(t, time.Minute, "servedByAll=false lists exactly the skew", func() error {
		out, err := cluster.Kubectl("--context", ctxOld, "get", "peerroutingtables", "--field-selector", "status.servedByAll=false", "-o", "name")
		if err != nil {
			return err
		}
		got := map[string]bool{}
		for _, l := range strings.Fields(out) {
			got[strings.TrimPrefix(l, "peerroutingtable.peerdiscovery.k8s.io/")] = true
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("got %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		return nil
	})
}
