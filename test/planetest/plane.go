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

package planetest

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// A package's tests share the one control plane its TestMain started, and
// each runs alone (go test -run) and in any order (-shuffle=on): it starts
// with ReadyPlane, and what it stops it starts again even when it fails
// (KeepServersRunning, KeepExtensionsRunning).

// ReadyPlane skips the test without a control plane (c is nil: TestMain
// did not start one), else waits until the control plane c is whole:
// every kube-apiserver ready with its filter's routing caches synced, the
// APIService available (when c runs peerdiscovery-apiserver), every
// kube-apiserver a ready peer, and a routing table for every resource. It returns the peers' identities by server
// index, read through server via (a test may have restarted a server
// under another identity and back).
func ReadyPlane(t testing.TB, c *localcluster.Cluster, via int) map[int]string {
	t.Helper()
	if c == nil {
		t.Skip("set PEERDISCOVERY_E2E=1 to run on a real control plane")
	}
	for i, s := range c.Servers() {
		WaitFor(t, 3*time.Minute, s.Name+" ready with its filter's caches synced", func() error {
			if code, _, body := Get(t, c.AdminConfig(i), "/readyz"); code != http.StatusOK {
				return fmt.Errorf("/readyz: %d %s", code, body)
			}
			if !FilterSynced(t, c, i) {
				return fmt.Errorf("peerdiscovery_filter_cache_synced is not 1")
			}
			return nil
		})
	}
	if len(c.Extensions()) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.WaitExtensionAvailable(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ids := WaitServerIDs(t, c, via)
	WaitFor(t, 2*time.Minute, "a routing table for every resource a server serves", func() error {
		return routingTablesComplete(t, c, via)
	})
	return ids
}

// routingTablesComplete compares the PeerRoutingTables with the union of
// every server's own discovery: right after a restart of the
// peerdiscovery-apiserver replicas or of a server, the tables can lack
// some resources for a moment.
func routingTablesComplete(t testing.TB, c *localcluster.Cluster, via int) error {
	t.Helper()
	want := map[schema.GroupVersionResource]bool{}
	for i := range c.Servers() {
		for _, path := range []string{"/api", "/apis"} {
			code, _, body := Get(t, c.AdminConfig(i), path, "Accept", discovery.AcceptV2+";profile=nopeer")
			if code != http.StatusOK {
				return fmt.Errorf("server %d %s: %d %s", i, path, code, body)
			}
			groups, err := ParseAggregated(body)
			if err != nil {
				return err
			}
			maps.Copy(want, GVRs(groups))
		}
	}
	tables, err := Client(t, c.AdminConfig(via)).PeerdiscoveryV1alpha1().PeerRoutingTables().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	got := map[schema.GroupVersionResource]bool{}
	for _, pt := range tables.Items {
		got[schema.GroupVersionResource{Group: pt.Spec.Group, Version: pt.Spec.Version, Resource: pt.Spec.Resource}] = true
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("%d routing tables, %d resources served", len(got), len(want))
	}
	return nil
}

// FilterSynced reports whether the filter of kube-apiserver i has its
// routing caches.
func FilterSynced(t testing.TB, c *localcluster.Cluster, i int) bool {
	t.Helper()
	code, _, body := Get(t, c.AdminConfig(i), "/metrics")
	return code == http.StatusOK && strings.Contains(string(body), "peerdiscovery_filter_cache_synced 1")
}

// KeepServersRunning makes sure, when the test ends, that the given
// kube-apiservers of c, which it stops, run again, even when the test
// failed before it started them itself: one that does not answer /livez
// within 10s is started again. (A test that freezes a server thaws it in
// a cleanup of its own, registered after this one so that it runs first.)
func KeepServersRunning(t testing.TB, c *localcluster.Cluster, servers ...int) {
	t.Helper()
	t.Cleanup(func() {
		for _, i := range servers {
			if answers(t, c.AdminConfig(i)) {
				continue
			}
			if err := c.StartAPIServer(i); err != nil {
				t.Errorf("starting %s again: %v", c.Servers()[i].Name, err)
			}
		}
	})
}

// answers reports whether the server of cfg answers /livez at all (any
// status) within 10s.
func answers(t testing.TB, cfg *rest.Config) bool {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 10 * time.Second
	code, _, _ := Get(t, cfg, "/livez")
	return code != 0
}

// KeepExtensionsRunning makes sure, when the test ends, that every
// peerdiscovery-apiserver replica of c runs and the APIService is
// available, even when the test failed before it started them itself.
func KeepExtensionsRunning(t testing.TB, c *localcluster.Cluster) {
	t.Helper()
	t.Cleanup(func() {
		for i := range c.Extensions() {
			if answers(t, c.ExtensionConfig(i)) {
				continue
			}
			if err := c.StartExtension(i); err != nil {
				t.Errorf("starting peerdiscovery-apiserver %d again: %v", i, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.WaitExtensionAvailable(ctx); err != nil {
			t.Errorf("the APIService after the test: %v", err)
		}
	})
}
