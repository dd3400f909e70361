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

package discoveryclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned/fake"
)

// bigObject is a merged document with 3,000 GVRs: core v1 with 30
// resources, 99 groups × 3 versions × 10 resources, each with a status
// subresource.
func bigObject() *v1alpha1.PeerAggregatedDiscovery {
	mk := func(group, version string, n int) []apidiscoveryv2.APIResourceDiscovery {
		var out []apidiscoveryv2.APIResourceDiscovery
		for i := 0; i < n; i++ {
			r := res(fmt.Sprintf("things%ds", i), fmt.Sprintf("Thing%d", i), apidiscoveryv2.ScopeNamespace, group, version,
				apidiscoveryv2.APISubresourceDiscovery{Subresource: "status", ResponseKind: &metav1.GroupVersionKind{Group: group, Version: version, Kind: fmt.Sprintf("Thing%d", i)}, Verbs: []string{"get", "update"}})
			r.ShortNames = []string{fmt.Sprintf("t%d", i)}
			out = append(out, r)
		}
		return out
	}
	obj := &v1alpha1.PeerAggregatedDiscovery{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.PeerAggregatedDiscoveryName, ResourceVersion: "1"}}
	obj.Status.API.Items = []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: mk("", "v1", 30)}}}}
	for g := 0; g < 99; g++ {
		name := fmt.Sprintf("group%d.example.com", g)
		grp := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, v := range []string{"v1", "v1beta1", "v1alpha1"} {
			grp.Versions = append(grp.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v, Resources: mk(name, v, 10)})
		}
		obj.Status.APIs.Items = append(obj.Status.APIs.Items, grp)
	}
	return obj
}

func BenchmarkServerGroupsAndResources(b *testing.B) {
	obj := bigObject()
	if n := newView(obj).gvrCount; n != 3000 {
		b.Fatalf("%d GVRs", n)
	}

	b.Run("ours", func(b *testing.B) {
		c := NewForClients(fake.NewSimpleClientset(obj), fallbackDiscovery())
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
		defer cancel()
		c.Start(ctx)
		if err := c.WaitForSync(ctx); err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})

	b.Run("client-go-memcache", func(b *testing.B) {
		api, _ := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{APIVersion: "apidiscovery.k8s.io/v2", Kind: "APIGroupDiscoveryList"}, Items: obj.Status.API.Items})
		apis, _ := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{APIVersion: "apidiscovery.k8s.io/v2", Kind: "APIGroupDiscoveryList"}, Items: obj.Status.APIs.Items})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", discovery.AcceptV2)
			switch r.URL.Path {
			case "/api":
				_, _ = w.Write(api)
			case "/apis":
				_, _ = w.Write(apis)
			default:
				http.NotFound(w, r)
			}
		}))
		defer srv.Close()
		dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
		if err != nil {
			b.Fatal(err)
		}
		run(b, memory.NewMemCacheClient(dc))
	})
}

func run(b *testing.B, d discovery.DiscoveryInterface) {
	// Warm, and check both see the same 3,000 GVRs.
	_, lists, err := d.ServerGroupsAndResources()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, l := range lists {
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") {
				n++
			}
		}
	}
	if n != 3000 {
		b.Fatalf("%d resources", n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := d.ServerGroupsAndResources(); err != nil {
			b.Fatal(err)
		}
	}
}
