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

// Package planetest is what the end-to-end packages share about their
// local control plane (internal/localcluster): starting it from TestMain
// (Main), the state every test starts from and leaves behind (ReadyPlane,
// KeepServersRunning), and the requests they make of it: raw requests,
// aggregated discovery, clients, the peers' identities and RouteReview.
package planetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/merge"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/test/poll"
)

// WaitFor calls f every 250ms until it returns nil, and fails the test with
// f's last error after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	poll.Until(t, 250*time.Millisecond, timeout, what, f)
}

// Do makes one request with cfg's credentials and returns the status,
// headers and body; headers are name, value pairs. A transport error is
// status 0 with the error as the body.
func Do(t testing.TB, cfg *rest.Config, method, path string, body io.Reader, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(cfg.Host, "/")+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// Get is Do with GET and no body.
func Get(t testing.TB, cfg *rest.Config, path string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	return Do(t, cfg, http.MethodGet, path, nil, headers...)
}

// Aggregated GETs path (/api or /apis) as aggregated discovery: with
// nopeer, the server's own view (profile=nopeer), else the merged one. It
// returns the groups, the ETag and the document as sent.
func Aggregated(t testing.TB, cfg *rest.Config, path string, nopeer bool) ([]apidiscoveryv2.APIGroupDiscovery, string, []byte) {
	t.Helper()
	accept := discovery.AcceptV2
	if nopeer {
		accept += ";profile=nopeer"
	}
	code, h, body := Get(t, cfg, path, "Accept", accept)
	if code != http.StatusOK {
		t.Fatalf("GET %s from %s: %d %s", path, cfg.Host, code, body)
	}
	groups, err := ParseAggregated(body)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, cfg.Host, err)
	}
	return groups, h.Get("ETag"), body
}

// ParseAggregated decodes an aggregated discovery document.
func ParseAggregated(body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// GVRs is the set of resources an aggregated discovery document lists.
func GVRs(groups []apidiscoveryv2.APIGroupDiscovery) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	for gvr := range merge.Resources(groups) {
		out[gvr] = true
	}
	return out
}

// Client is a peerdiscovery.k8s.io clientset with cfg's credentials.
func Client(t testing.TB, cfg *rest.Config) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Ready reports whether an APIServerPeer's Ready condition is True.
func Ready(p *v1alpha1.APIServerPeer) bool {
	return apimeta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionReady)
}

// ServerIDs maps each kube-apiserver of c, by index, to its identity as a
// ready peer that registered itself (its filter's registration Lease), as
// far as the APIServerPeers read through server via say now.
func ServerIDs(ctx context.Context, c *localcluster.Cluster, via int) (map[int]string, error) {
	peers, err := versionedFor(c, via).PeerdiscoveryV1alpha1().APIServerPeers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for i, s := range c.Servers() {
		for _, p := range peers.Items {
			host, _, _ := net.SplitHostPort(p.Spec.Endpoint)
			if host == s.IP && Ready(&p) && slices.Contains(p.Spec.Sources, v1alpha1.PeerSourceRegistrationLease) {
				out[i] = p.Spec.ServerID
			}
		}
	}
	return out, nil
}

// WaitServerIDs waits until every kube-apiserver of c is a ready peer and
// returns their identities by index.
func WaitServerIDs(t testing.TB, c *localcluster.Cluster, via int) map[int]string {
	t.Helper()
	var ids map[int]string
	WaitFor(t, 2*time.Minute, "every kube-apiserver known as a ready peer", func() (err error) {
		if ids, err = ServerIDs(context.Background(), c, via); err != nil {
			return err
		}
		if len(ids) != len(c.Servers()) {
			return fmt.Errorf("ready peers by server: %v", ids)
		}
		return nil
	})
	return ids
}

func versionedFor(c *localcluster.Cluster, i int) versioned.Interface {
	// NewForConfig fails only on an invalid rest.Config, which
	// AdminConfig never is.
	return versioned.NewForConfigOrDie(c.AdminConfig(i))
}

// Review asks RouteReview through cfg how a request verb path from the
// peer source is routed.
func Review(t testing.TB, cfg *rest.Config, verb, path, source string) v1alpha1.RouteReviewStatus {
	t.Helper()
	r, err := Client(t, cfg).PeerdiscoveryV1alpha1().RouteReviews().Create(context.Background(), &v1alpha1.RouteReview{
		Spec: v1alpha1.RouteReviewSpec{Verb: verb, Path: path, SourcePeer: source},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("RouteReview %s %s from %s: %v", verb, path, source, err)
	}
	return r.Status
}

// Check503 checks a 503 of the filter: a ServiceUnavailable Status, with
// Retry-After exactly when the answering server expects to know better
// within seconds (not synced yet, its view catching up with a live peer's
// Lease, a peer the view lists ready that could not be connected to), and
// without it when every server that serves the resource is not ready or
// has left, or refused the connection (docs/design.md, "Retry-After").
func Check503(h http.Header, body []byte) error {
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" {
		return fmt.Errorf("503 without a Status body: %.300s", body)
	}
	if st.Reason != metav1.StatusReasonServiceUnavailable {
		return fmt.Errorf("503 with reason %q, want ServiceUnavailable: %s", st.Reason, st.Message)
	}
	soon := false
	for _, m := range []string{"not synced yet", "registration lease records it", "could be reached", "may be back within seconds"} {
		soon = soon || strings.Contains(st.Message, m)
	}
	switch ra := h.Get("Retry-After"); {
	case soon && ra != "1":
		return fmt.Errorf("503 %q with Retry-After %q, want 1", st.Message, ra)
	case !soon && ra != "":
		return fmt.Errorf("503 %q with Retry-After %q, want none (no server that serves it is ready)", st.Message, ra)
	}
	return nil
}
