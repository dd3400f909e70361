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

package filter

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

type shutdownSignal chan struct{}

func (s shutdownSignal) ShuttingDown() <-chan struct{} { return s }

// A watch proxied through a server that shuts down ends when the server
// stops accepting requests, as the server's own watches do; before, it
// held the stopping kube-apiserver open until its shutdown timeout.
func TestProxiedWatchEndsOnShutdown(t *testing.T) {
	e := newEnv(t)
	peerSawEnd := make(chan struct{})
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"w1","resourceVersion":"11"}}}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a watch that never ends by itself
		close(peerSawEnd)
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	resetUpstreamMetrics()

	// kube-apiserver's WithWatchTerminationDuringShutdown, played here.
	sig := make(shutdownSignal)
	front := httptest.NewServer(e.withAudit(withRequestInfoAndUser(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.handler.ServeHTTP(w, r.WithContext(apirequest.WithServerShutdownSignal(r.Context(), sig)))
	}), func() user.Info { return e.user.Load() })))
	defer front.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/apis/example.com/v1/namespaces/ns1/widgets?watch=true", nil)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first event: %d %q %v", resp.StatusCode, line, err)
	}
	close(sig)
	start := time.Now()
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after shutdown: %q %v", rest, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the watch ended %s after the shutdown signal", took)
	}
	select {
	case <-peerSawEnd:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's watch was not ended")
	}
	for _, typ := range []string{"proxy", "canceled"} {
		if v := counterValue(t, "apiserver_peer_proxy_errors_total", map[string]string{"type": typ}); v != 0 {
			t.Errorf("a watch ended by shutdown counted as a %s error (%v)", typ, v)
		}
	}
}
