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

package nopeer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// noPeerServer answers /apis with body as aggregated discovery.
func noPeerServer(t *testing.T, body string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(ts.Close)
	return ts
}

func discoveryListJSON(t *testing.T, items ...apidiscoveryv2.APIGroupDiscovery) string {
	t.Helper()
	b, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{APIVersion: "apidiscovery.k8s.io/v2", Kind: "APIGroupDiscoveryList"},
		Items:    items,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readType(err error) ErrorType {
	var re *ReadError
	if errors.As(err, &re) {
		return re.Type
	}
	return ""
}

func TestNoPeerDiscoveryValidates(t *testing.T) {
	good := apidiscoveryv2.APIGroupDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: "apps"},
		Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			Resources: []apidiscoveryv2.APIResourceDiscovery{{Resource: "deployments", Scope: apidiscoveryv2.ScopeNamespace,
				ResponseKind: &metav1.GroupVersionKind{Version: "v1", Kind: "Deployment"}, Verbs: []string{"get"}}}}},
	}
	bad := good
	bad.Name = "Not A Group"
	for _, tc := range []struct {
		name string
		body string
		want ErrorType
	}{
		{"valid", discoveryListJSON(t, good), ""},
		{"invalid group name", discoveryListJSON(t, bad), ErrInvalid},
		{"repeated group", discoveryListJSON(t, good, good), ErrInvalid},
		{"not JSON", "<html>", ErrDecode},
		{"another kind", `{"kind":"APIGroupList","groups":[]}`, ErrDecode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := noPeerServer(t, tc.body)
			doc, err := NewClient(ts.Client(), 1<<20).Discovery(context.Background(), ts.URL, "/apis", "")
			if got := readType(err); got != tc.want {
				t.Fatalf("Discovery: %v (type %q), want type %q", err, got, tc.want)
			}
			if tc.want == "" && (len(doc.Items) != 1 || doc.ETag == "") {
				t.Errorf("document %+v: want one group and the document's hash as ETag", doc)
			}
		})
	}
}

// Documents decode within a memory budget: while it is taken, a read
// waits for it up to its deadline, and then fails with a clear timeout.
func TestNoPeerDecodesWithinTheMemoryBudget(t *testing.T) {
	ts := noPeerServer(t, discoveryListJSON(t))
	c := NewClient(ts.Client(), 1<<20)
	all := c.maxBytes * decodeFactor
	if err := c.decode.Acquire(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Discovery(ctx, ts.URL, "/apis", "")
	if readType(err) != ErrTimeout || !strings.Contains(err.Error(), "waiting for memory") {
		t.Fatalf("read with the budget taken: %v, want a Timeout waiting for memory", err)
	}
	c.decode.Release(all)
	if _, err := c.Discovery(context.Background(), ts.URL, "/apis", ""); err != nil {
		t.Fatalf("read with the budget free: %v", err)
	}
	// Nothing is left taken after successful reads.
	if !c.decode.TryAcquire(all) {
		t.Fatal("the decode budget leaked")
	}
}
