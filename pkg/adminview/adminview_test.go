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

package adminview

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func peer(id, version string, ready bool, reason string, synced time.Duration, left bool) v1alpha1.APIServerPeer {
	p := v1alpha1.APIServerPeer{
		ObjectMeta: metav1.ObjectMeta{Name: id},
		Spec:       v1alpha1.APIServerPeerSpec{ServerID: id, Endpoint: "10.0.0." + id[len(id)-1:] + ":6443", BinaryVersion: version},
		Status:     v1alpha1.APIServerPeerStatus{ResourceCount: 100},
	}
	status := metav1.ConditionFalse
	if ready {
		status = metav1.ConditionTrue
	}
	p.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: status, Reason: reason}}
	if synced > 0 {
		t := metav1.NewTime(now.Add(-synced))
		p.Status.LastSyncTime = &t
	}
	if left {
		t := metav1.NewTime(now.Add(-time.Minute))
		p.Status.LeftTime = &t
	}
	return p
}

func table(g, v, r string, servedByAll bool, ids ...string) v1alpha1.PeerRoutingTable {
	gvr := schema.GroupVersionResource{Group: g, Version: v, Resource: r}
	t := v1alpha1.PeerRoutingTable{
		ObjectMeta: metav1.ObjectMeta{Name: compute.RouteName(gvr)},
		Spec:       v1alpha1.PeerRoutingTableSpec{Group: g, Version: v, Resource: r},
		Status:     v1alpha1.PeerRoutingTableStatus{ServedByAll: servedByAll},
	}
	for _, id := range ids {
		t.Status.Peers = append(t.Status.Peers, v1alpha1.RoutingPeer{ServerID: id})
	}
	return t
}

// A v1.36.3 server (apiserver-1), two v1.37.2 (apiserver-2 ready,
// apiserver-3 not), one v1.37.2 that shut down (apiserver-4).
func fixture() ([]v1alpha1.APIServerPeer, []v1alpha1.PeerRoutingTable) {
	peers := []v1alpha1.APIServerPeer{
		peer("apiserver-3", "v1.37.2", false, "ConnectionRefused", 90*time.Second, false),
		peer("apiserver-2", "v1.37.2", true, "Synced", 3*time.Second, false),
		peer("apiserver-1", "v1.36.3", true, "Synced", 4*time.Second, false),
		peer("apiserver-4", "v1.37.2", false, "Left", 0, true),
	}
	tables := []v1alpha1.PeerRoutingTable{
		table("", "v1", "pods", true, "apiserver-1", "apiserver-2", "apiserver-3"),
		table("storagemigration.k8s.io", "v1beta1", "storageversionmigrations", false, "apiserver-2", "apiserver-3"),
		table("certificates.k8s.io", "v1", "podcertificaterequests", false, "apiserver-3"),
		table("flowcontrol.example", "v1beta3", "flowschemas", false, "apiserver-1"),
		table("gone.example", "v1", "widgets", false, "apiserver-4"),
	}
	return peers, tables
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/adminview -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestStatusGolden(t *testing.T) {
	peers, tables := fixture()
	var out bytes.Buffer
	if err := WriteStatus(&out, NewStatus(peers, tables), now, false); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out.Bytes(), []byte("\x1b")) {
		t.Fatal("plain text carries escape codes")
	}
	golden(t, "status.txt", out.Bytes())
}

func TestStatusColored(t *testing.T) {
	peers, tables := fixture()
	var plainOut, colored bytes.Buffer
	st := NewStatus(peers, tables)
	if err := WriteStatus(&plainOut, st, now, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteStatus(&colored, st, now, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{green + "local" + reset, yellow + "-> B" + reset, red + "503" + reset, dim + "left" + reset, red + "no (ConnectionRefused)" + reset} {
		if !strings.Contains(colored.String(), want) {
			t.Errorf("colored output lacks %q", want)
		}
	}
	// Colors change no column: without the escapes, it is the plain text.
	stripped := colored.String()
	for _, code := range []string{bold, green, yellow, red, dim, reset} {
		stripped = strings.ReplaceAll(stripped, code, "")
	}
	if stripped != plainOut.String() {
		t.Errorf("colored output, stripped, differs from plain:\n%s\n---\n%s", stripped, plainOut.String())
	}
}

func TestStatusCells(t *testing.T) {
	peers, tables := fixture()
	st := NewStatus(peers, tables)
	keys := ""
	for _, s := range st.Servers {
		keys += s.Key + "=" + s.ServerID + " "
	}
	if keys != "A=apiserver-1 B=apiserver-2 C=apiserver-3 D=apiserver-4 " {
		t.Fatalf("servers, oldest first: %s", keys)
	}
	if st.Routes != 5 || len(st.Skew) != 4 {
		t.Fatalf("routes %d, skew %d", st.Routes, len(st.Skew))
	}
	got := map[string]string{}
	for _, r := range st.Skew {
		var cells []string
		for _, c := range r.Cells {
			cells = append(cells, string(c.Decision)+":"+c.To)
		}
		got[r.GVR] = strings.Join(cells, " ")
	}
	want := map[string]string{
		// apiserver-3 is not ready, so A proxies to B only.
		"storagemigration.k8s.io/v1beta1/storageversionmigrations": "Proxy:apiserver-2 Local: Local: :",
		// Its only server is not ready: 503 everywhere else.
		"certificates.k8s.io/v1/podcertificaterequests": "Unavailable: Unavailable: Local: :",
		"flowcontrol.example/v1beta3/flowschemas":       "Local: Proxy:apiserver-1 Proxy:apiserver-1 :",
		// Served only by a server that left: 503 (tombstone), not 404.
		"gone.example/v1/widgets": "Unavailable: Unavailable: Unavailable: :",
	}
	for gvr, w := range want {
		if got[gvr] != w {
			t.Errorf("%s: got %q, want %q", gvr, got[gvr], w)
		}
	}
}

func TestDrain(t *testing.T) {
	peers, tables := fixture()
	for _, tc := range []struct {
		names             []string
		unavailable, fail string
	}{
		// The old server: flowschemas lose their only server.
		{[]string{"apiserver-1"}, "flowcontrol.example/v1beta3/flowschemas [{apiserver-2 } {apiserver-3 }]", ""},
		// The ready new server: storageversionmigrations' only ready one.
		{[]string{"apiserver-2"}, "storagemigration.k8s.io/v1beta1/storageversionmigrations [{apiserver-1 }]", ""},
		// The not-ready one: nothing proxied to it, nothing it alone serves.
		{[]string{"apiserver-3"}, "", ""},
		{[]string{"apiserver-2", "apiserver-2"}, "storagemigration.k8s.io/v1beta1/storageversionmigrations [{apiserver-1 }]", ""},
		// A version names every server of it that has not left.
		// podcertificaterequests is 503 already (apiserver-3 is not ready):
		// the drain does not make it so.
		{[]string{"v1.37.2"}, "storagemigration.k8s.io/v1beta1/storageversionmigrations [{apiserver-1 }]", ""},
		{[]string{"v1.36.3"}, "flowcontrol.example/v1beta3/flowschemas [{apiserver-2 } {apiserver-3 }]", ""},
	} {
		d, err := NewDrain(peers, tables, tc.names)
		if err != nil {
			t.Fatal(err)
		}
		if got := rows(d.Unavailable); got != tc.unavailable {
			t.Errorf("%v: unavailable %q, want %q", tc.names, got, tc.unavailable)
		}
		if got := rows(d.FailOver); got != tc.fail {
			t.Errorf("%v: fail over %q, want %q", tc.names, got, tc.fail)
		}
	}
	_, err := NewDrain(peers, tables, []string{"apiserver-9"})
	if err == nil || !strings.Contains(err.Error(), `unknown server "apiserver-9"; known servers: apiserver-1 (v1.36.3), apiserver-2 (v1.37.2)`) {
		t.Fatalf("unknown server: %v", err)
	}
}

func TestDrainFailOverGolden(t *testing.T) {
	peers, tables := fixture()
	peers[0] = peer("apiserver-3", "v1.37.2", true, "Synced", time.Second, false)
	d, err := NewDrain(peers, tables, []string{"apiserver-2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := rows(d.FailOver); got != "storagemigration.k8s.io/v1beta1/storageversionmigrations [{apiserver-1 apiserver-3}]" {
		t.Errorf("fail over: %s", got)
	}
	var out bytes.Buffer
	if err := WriteDrain(&out, d, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "drain.txt", out.Bytes())
	data, err := json.Marshal(d)
	if err != nil || !strings.Contains(string(data), `"failOver":[{"gvr":"storagemigration.k8s.io/v1beta1/storageversionmigrations","from":[{"server":"apiserver-1","to":"apiserver-3"}]}]`) {
		t.Errorf("json: %s %v", data, err)
	}
}

func TestExplain(t *testing.T) {
	peers, _ := fixture()
	servers := Servers(peers)
	from := &servers[0]
	e := NewExplain("LIST", "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations", from, servers, v1alpha1.RouteReviewStatus{
		Decision: v1alpha1.RouteProxy, Target: "apiserver-2", Reason: "storagemigration.k8s.io/v1beta1/storageversionmigrations is not served here; proxy to apiserver-2",
		Candidates: []v1alpha1.RouteCandidate{{ServerID: "apiserver-2", Ready: true}},
	})
	want := "On apiserver-1 (v1.36.3), list /apis/storagemigration.k8s.io/v1beta1/storageversionmigrations is proxied to apiserver-2 (v1.37.2): storagemigration.k8s.io/v1beta1/storageversionmigrations is not served here; proxy to apiserver-2."
	if e.Sentence != want {
		t.Errorf("sentence:\n%s\nwant\n%s", e.Sentence, want)
	}
	var out bytes.Buffer
	if err := WriteExplain(&out, e, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "explain.txt", out.Bytes())

	e = NewExplain("get", "/healthz", nil, servers, v1alpha1.RouteReviewStatus{Decision: v1alpha1.RouteLocal, Reason: "not a resource request"})
	if e.Sentence != "On a server that serves only what every server serves, get /healthz is served by that server itself: not a resource request." {
		t.Errorf("sentence: %s", e.Sentence)
	}
	for d, words := range map[v1alpha1.RouteDecision]string{v1alpha1.RouteUnavailable: "gets 503 Service Unavailable with Retry-After", v1alpha1.RouteNotFound: "gets 404 Not Found"} {
		if e := NewExplain("get", "/x", nil, servers, v1alpha1.RouteReviewStatus{Decision: d, Reason: "r"}); !strings.Contains(e.Sentence, words) {
			t.Errorf("%s: %s", d, e.Sentence)
		}
	}
}

func TestServersOrderAndKeys(t *testing.T) {
	peers := []v1alpha1.APIServerPeer{
		peer("s-1", "v1.37.10", true, "", 0, false), peer("s-2", "v1.37.9", true, "", 0, false),
		peer("s-3", "weird", true, "", 0, false), peer("s-4", "v1.36.3", true, "", 0, false),
	}
	var got []string
	for _, s := range Servers(peers) {
		got = append(got, s.Key+"="+s.Version)
	}
	if strings.Join(got, " ") != "A=v1.36.3 B=v1.37.9 C=v1.37.10 D=weird" {
		t.Fatalf("order: %v", got)
	}
	if columnKey(25) != "Z" || columnKey(26) != "AA" || columnKey(27) != "AB" {
		t.Fatal("column keys past Z")
	}
}

func rows(rs []DrainRow) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GVR+" "+strings.TrimSpace(strings.ReplaceAll(fmtMoves(r.Moves), "  ", " ")))
	}
	return strings.Join(out, "; ")
}

func fmtMoves(ms []Move) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, "{"+m.Server+" "+m.To+"}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}
