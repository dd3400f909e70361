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

package egress

import (
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

const (
	svmPath = "/apis/storagemigration.k8s.io/v1/storageversionmigrations" // v1.37.2 only
	pdbPath = "/apis/policy/v1/poddisruptionbudgets"                      // v1.36.3 only here
)

// TestPeerConnectionsGoThroughTheEgressSelector: with an egress selector
// whose controlplane network context is an HTTP CONNECT proxy, every
// request one kube-apiserver proxies to the other goes through that proxy
// (plain requests, a write, a watch, an upgrade, group-version discovery
// and OpenAPI), both ways, while no direct connection between the two
// servers is possible: a partition drops any (iptables, by the servers'
// socket owners), and its rules count what they matched, which must be
// nothing. The extension server is outside it: it reaches the servers at
// their advertised endpoints directly, as a client in the cluster does.
func TestPeerConnectionsGoThroughTheEgressSelector(t *testing.T) {
	planetest.ReadyPlane(t, cluster, v136)
	servers := cluster.Servers()
	// peer is server i's peer endpoint (its registration Lease's), which
	// the servers CONNECT to.
	peer := func(i int) string {
		u, err := url.Parse(servers[i].Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	serving, err := egressServing.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	proxy := startConnectProxy(t, proxyAddress(), serving, egressCA.Pool(), []string{peer(v136), peer(v137)})
	if err := cluster.PartitionAPIServers(v136, v137); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.HealPartition(v136, v137); err != nil {
			t.Errorf("healing the partition: %v", err)
		}
	})

	// through sends one request to server src that src must proxy to
	// server dst, and checks that its bytes went through the proxy's
	// tunnels from src to dst: at least the request body up and the
	// answer's body down (Accept-Encoding identity: no compression on
	// either hop, so the bytes through the tunnel are at least as many).
	through := func(src, dst int, method, path, body string, want int) string {
		t.Helper()
		before := proxy.counts(egressClientName(src), peer(dst))
		var in io.Reader
		headers := []string{"Accept-Encoding", "identity"}
		if body != "" {
			in = strings.NewReader(body)
			headers = append(headers, "Content-Type", "application/json")
		}
		code, _, got := planetest.Do(t, cluster.AdminConfig(src), method, path, in, headers...)
		if code != want {
			t.Fatalf("%s %s through %s (%s): %d %.400s, want %d", method, path, servers[src].Name, servers[src].Version, code, got, want)
		}
		after := proxy.counts(egressClientName(src), peer(dst))
		if up, down := after.Up-before.Up, after.Down-before.Down; up < int64(len(body)) || down < int64(len(got)) || down == 0 {
			t.Fatalf("%s %s through %s: the tunnels to %s carried %d bytes up, %d down; the request body is %d bytes, the answer's %d",
				method, path, servers[src].Name, servers[dst].Name, up, down, len(body), len(got))
		}
		t.Logf("%s %s through %s (%s): %d, %d bytes; through the proxy to %s: %d up, %d down",
			method, path, servers[src].Name, servers[src].Version, code, len(got), servers[dst].Name, after.Up-before.Up, after.Down-before.Down)
		return string(got)
	}

	// v1.36.3 to v1.37.2: a write, a read, a watch, discovery and OpenAPI
	// of a group-version only v1.37.2 serves.
	created := through(v136, v137, http.MethodPost, svmPath,
		`{"apiVersion":"storagemigration.k8s.io/v1","kind":"StorageVersionMigration","metadata":{"generateName":"egress-"},"spec":{"resource":{"group":"","resource":"configmaps"}}}`,
		http.StatusCreated)
	name := objectName(t, created)
	if list := through(v136, v137, http.MethodGet, svmPath, "", http.StatusOK); !strings.Contains(list, name) {
		t.Fatalf("the list through %s lacks %s: %.400s", servers[v136].Name, name, list)
	}
	if events := through(v136, v137, http.MethodGet, svmPath+"?watch=true&timeoutSeconds=2", "", http.StatusOK); !strings.Contains(events, `"type":"ADDED"`) || !strings.Contains(events, name) {
		t.Fatalf("the watch through %s did not stream %s: %.400s", servers[v136].Name, name, events)
	}
	through(v136, v137, http.MethodGet, "/apis/storagemigration.k8s.io/v1", "", http.StatusOK)
	through(v136, v137, http.MethodGet, "/openapi/v3/apis/storagemigration.k8s.io/v1", "", http.StatusOK)

	// An upgrade (a watch over a websocket) dials a connection of its own.
	before := proxy.counts(egressClientName(v136), peer(v137))
	if event := websocketWatch(t, v136, svmPath+"?watch=true"); !strings.Contains(event, `"type":"ADDED"`) || !strings.Contains(event, name) {
		t.Fatalf("the websocket watch through %s: first message %.400s, want the ADDED %s", servers[v136].Name, event, name)
	}
	after := proxy.counts(egressClientName(v136), peer(v137))
	if after.Connects != before.Connects+1 || after.Down <= before.Down {
		t.Fatalf("the websocket watch through %s: tunnels to %s %+v before, %+v after; want one more", servers[v136].Name, servers[v137].Name, before, after)
	}
	t.Logf("websocket watch through %s: 101 and the ADDED event; through the proxy to %s: 1 more CONNECT, %d up, %d down",
		servers[v136].Name, servers[v137].Name, after.Up-before.Up, after.Down-before.Down)

	// v1.37.2 to v1.36.3: a group-version only v1.36.3 serves here.
	through(v137, v136, http.MethodGet, pdbPath, "", http.StatusOK)
	through(v137, v136, http.MethodGet, "/apis/policy/v1", "", http.StatusOK)

	for _, r := range [][2]int{{v136, v137}, {v137, v136}} {
		c := proxy.counts(egressClientName(r[0]), peer(r[1]))
		t.Logf("CONNECT tunnels from %s to %s: %d, %d bytes up, %d down", servers[r[0]].Name, servers[r[1]].Name, c.Connects, c.Up, c.Down)
		if c.Connects == 0 {
			t.Errorf("no CONNECT from %s to %s", servers[r[0]].Name, servers[r[1]].Name)
		}
	}
	if refused := proxy.refusedTargets(); len(refused) > 0 {
		t.Errorf("CONNECTs to addresses that are not kube-apiservers of the plane: %v", refused)
	}
	if n := directConnectionPackets(t); n != 0 {
		t.Errorf("the partition's rules matched %d packets: a kube-apiserver tried to connect to the other directly", n)
	} else {
		t.Logf("the partition's rules matched no packet: no kube-apiserver tried to connect to the other directly")
	}
}

// objectName reads metadata.name from a JSON object.
func objectName(t *testing.T, obj string) string {
	t.Helper()
	_, rest, ok := strings.Cut(obj, `"name":"`)
	name, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 || name == "" {
		t.Fatalf("no metadata.name in %.400s", obj)
	}
	return name
}

// websocketWatch opens a watch over a websocket (an upgrade) through
// kube-apiserver i and returns its first message.
func websocketWatch(t *testing.T, i int, path string) string {
	t.Helper()
	cfg := cluster.AdminConfig(i)
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	wsConfig, err := websocket.NewConfig("wss://"+u.Host+path, "https://"+u.Host)
	if err != nil {
		t.Fatal(err)
	}
	wsConfig.TlsConfig = tlsConfig
	ws, err := websocket.DialConfig(wsConfig)
	if err != nil {
		t.Fatalf("websocket watch %s through %s: %v", path, cfg.Host, err)
	}
	defer ws.Close()
	if err := ws.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var msg string
	if err := websocket.Message.Receive(ws, &msg); err != nil {
		t.Fatalf("websocket watch %s through %s: %v", path, cfg.Host, err)
	}
	return msg
}

// directConnectionPackets sums the packets the partition's marking rules
// matched in the plane's network namespace: packets a kube-apiserver's
// socket sent to the other's address and port.
func directConnectionPackets(t *testing.T) int64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", cluster.NetworkNamespace(), "iptables", "-w", "5", "-L", "OUTPUT", "-v", "-x", "-n").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables -L OUTPUT: %v: %s", err, out)
	}
	var sum int64
	rules := 0
	for line := range strings.SplitSeq(string(out), "\n") {
		if !strings.Contains(line, "CONNMARK set") {
			continue
		}
		n, err := strconv.ParseInt(strings.Fields(line)[0], 10, 64)
		if err != nil {
			t.Fatalf("iptables -L OUTPUT: %q: %v", line, err)
		}
		sum += n
		rules++
	}
	if rules != 2 {
		t.Fatalf("%d partition rules in OUTPUT, want 2 (one per server):\n%s", rules, out)
	}
	return sum
}
