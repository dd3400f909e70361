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
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"

	"sigs.k8s.io/peerdiscovery/pkg/discoveryclient"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestDiscoveryClient: a client connected only to the v1.36.3 server sees,
// maps and reads storagemigration.k8s.io/v1, which only the v1.37.2 servers
// serve, through the merged view and the filter's proxying.
func TestDiscoveryClient(t *testing.T) {
	readyPlane(t)
	// Sanity: the old server does not serve the GV itself.
	if own, _, _ := discovery(t, old, "/apis", true); planetest.GVRs(own)[svm] {
		t.Fatalf("server %d serves %s itself; the test needs a skew", old, svm)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// An object to read, created through a server that serves the GV.
	name := "e2e-discoveryclient"
	_ = planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm).Delete(ctx, name, metav1.DeleteOptions{})
	planetest.WaitFor(t, time.Minute, "creating a StorageVersionMigration on server 1", func() error {
		_, err := planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm).Create(ctx, newSVM(name), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("still being deleted: %w", err)
		}
		return err
	})
	t.Cleanup(func() {
		_ = planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm).Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	cfg := cluster.AdminConfig(old)
	dc, err := discoveryclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc.Start(ctx)
	// The merged view may be published a little after the servers are up.
	planetest.WaitFor(t, 2*time.Minute, "the merged view with "+svm.String(), func() error {
		if err := dc.WaitForSync(ctx); err != nil {
			return err
		}
		if !dc.Complete() {
			return fmt.Errorf("view not complete")
		}
		l, err := dc.ServerResourcesForGroupVersion(svm.GroupVersion().String())
		if err != nil {
			return err
		}
		for _, r := range l.APIResources {
			if r.Name == svm.Resource {
				return nil
			}
		}
		return fmt.Errorf("%s not in %v", svm.Resource, l.APIResources)
	})
	api, apis := dc.ETags()
	t.Logf("merged view in use: /api ETag %.16s, /apis ETag %.16s", api, apis)

	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("ServerGroupsAndResources: %v", err)
	}
	found := false
	for _, l := range lists {
		found = found || l.GroupVersion == svm.GroupVersion().String()
	}
	if !found {
		t.Fatalf("ServerGroupsAndResources lacks %s", svm.GroupVersion())
	}
	preferred, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("ServerPreferredResources: %v", err)
	}
	found = false
	for _, l := range preferred {
		for _, r := range l.APIResources {
			found = found || (l.GroupVersion == svm.GroupVersion().String() && r.Name == svm.Resource)
		}
	}
	if !found {
		t.Fatalf("ServerPreferredResources lacks %s", svm)
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(dc)
	m, err := mapper.RESTMapping(schema.GroupKind{Group: svm.Group, Kind: "StorageVersionMigration"})
	if err != nil {
		t.Fatalf("mapping Kind StorageVersionMigration: %v", err)
	}
	if m.Resource != svm {
		t.Fatalf("mapped to %v, want %v", m.Resource, svm)
	}

	// Read through the v1.36.3 server: the filter proxies to a v1.37.2 peer.
	d := planetest.Dynamic(t, cfg)
	planetest.WaitFor(t, time.Minute, "reading StorageVersionMigrations through server 0", func() error {
		list, err := d.Resource(m.Resource).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, o := range list.Items {
			if o.GetName() == name {
				return nil
			}
		}
		return fmt.Errorf("%s not listed (%d items)", name, len(list.Items))
	})
	if _, err := d.Resource(m.Resource).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("get %s through server %d: %v", name, old, err)
	}
}
