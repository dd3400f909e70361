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

package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTableOutputAndOpenAPI(t *testing.T) {
	ts := startServer(t)
	if err := ts.srv.Publisher.Publish(view(1, true)); err != nil {
		t.Fatal(err)
	}
	accept := "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
	for path, cols := range map[string][]string{
		"/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables":         {"Name", "Group", "Version", "Resource", "Ready", "Served-By-All", "Cluster-Wide", "Age"},
		"/apis/peerdiscovery.k8s.io/v1alpha1/apiserverpeers":            {"Name", "Endpoint", "Version", "Ready", "GVRs", "Last-Sync", "Age"},
		"/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries": {"Name", "Groups", "Peers", "ETag", "Age"},
	} {
		code, body := ts.get(t, ts.admin(), path, "Accept", accept)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var table metav1.Table
		if err := json.Unmarshal([]byte(body), &table); err != nil {
			t.Fatal(err)
		}
		if table.Kind != "Table" || len(table.Rows) == 0 {
			t.Fatalf("%s: not a table with rows: %s", path, body)
		}
		for _, want := range cols {
			found := false
			for _, c := range table.ColumnDefinitions {
				found = found || c.Name == want
			}
			if !found {
				t.Errorf("%s: no column %q in %v", path, want, table.ColumnDefinitions)
			}
		}
	}
	// Clients that prefer protobuf with a JSON fallback (the garbage
	// collector, the namespace controller) get JSON, not a 406.
	code, body := ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables", "Accept", "application/vnd.kubernetes.protobuf, application/json")
	if code != http.StatusOK || !strings.HasPrefix(body, "{") {
		t.Fatalf("protobuf-then-JSON list: %d %.200s", code, body)
	}
	code, body = ts.get(t, ts.admin(), "/openapi/v3/apis/peerdiscovery.k8s.io/v1alpha1")
	if code != http.StatusOK || !strings.Contains(body, "io.k8s.peerdiscovery.v1alpha1.PeerRoutingTable") {
		t.Fatalf("openapi v3: %d %.300s", code, body)
	}
	code, body = ts.get(t, ts.admin(), "/openapi/v2")
	if code != http.StatusOK || !strings.Contains(body, "io.k8s.peerdiscovery.v1alpha1.APIServerPeer") {
		t.Fatalf("openapi v2: %d %.300s", code, body)
	}
	// Discovery advertises short names and the category.
	code, body = ts.get(t, ts.admin(), "/apis/peerdiscovery.k8s.io/v1alpha1")
	if code != http.StatusOK || !strings.Contains(body, `"prt"`) || !strings.Contains(body, `"peerdiscovery"`) {
		t.Fatalf("discovery: %d %s", code, body)
	}
}

// The merged discovery object is large at scale: a GET of it is
// gzip-compressed for clients that accept gzip.
func TestLargeDiscoveryObjectIsCompressed(t *testing.T) {
	ts := startServer(t)
	if err := ts.srv.Publisher.Publish(view(3000, true)); err != nil {
		t.Fatal(err)
	}
	path := "/apis/peerdiscovery.k8s.io/v1alpha1/peeraggregateddiscoveries/cluster"
	code, plain := ts.get(t, ts.admin(), path, "Accept", "application/json")
	if code != http.StatusOK || len(plain) < 128<<10 {
		t.Fatalf("plain GET: %d, %d bytes (want over 128 KiB for this test)", code, len(plain))
	}
	code, zipped := ts.get(t, ts.admin(), path, "Accept", "application/json", "Accept-Encoding", "gzip")
	if code != http.StatusOK || !strings.HasPrefix(zipped, "\x1f\x8b") || len(zipped) > len(plain)/3 {
		t.Fatalf("gzip GET: %d, %d bytes of %d, gzip magic %v", code, len(zipped), len(plain), strings.HasPrefix(zipped, "\x1f\x8b"))
	}
	t.Logf("merged discovery object: %d bytes, %d gzip-compressed", len(plain), len(zipped))
}
