package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"

	"sigs.k8s.io/peerdiscovery/pkg/discoveryclient"
)

// TestDiscoveryClient: a client connected only to the v1.36.3 server sees,
// maps and reads storagemigration.k8s.io/v1, which only the v1.37.2 servers
// serve, through the merged view and the filter's proxying.
func TestDiscoveryClient(t *testing.T) {
	needCluster(t)
	// TestControlPlane stops and starts servers: wait until all answer.
	waitFor(t, 3*time.Minute, "every kube-apiserver healthy", func() error {
		for i := range cluster.Servers() {
			if code, _, body := raw(t, cluster.AdminConfig(i), http.MethodGet, "/readyz", nil); code != http.StatusOK {
				return fmt.Errorf("server %d /readyz: %d %s", i, code, body)
			}
		}
		return nil
	})
	// Sanity: the old server does not serve the GV itself.
	if own := gvrSet(ownAPIs(t)); own[svm] {
		t.Fatalf("server %d serves %s itself; the test needs a skew", old, svm)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// An object to read, created through a server that serves the GV.
	name := "e2e-discoveryclient"
	_ = dyn(t, cluster.AdminConfig(new1)).Resource(svm).Delete(ctx, name, metav1.DeleteOptions{})
	waitFor(t, time.Minute, "creating a StorageVersionMigration on server 1", func() error {
		_, err := dyn(t, cluster.AdminConfig(new1)).Resource(svm).Create(ctx, newSVM(name), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("still being deleted: %w", err)
		}
		return err
	})
	t.Cleanup(func() {
		_ = dyn(t, cluster.AdminConfig(new1)).Resource(svm).Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	cfg := cluster.AdminConfig(old)
	dc, err := discoveryclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc.Start(ctx)
	// The merged view may be published a little after the servers are up.
	waitFor(t, 2*time.Minute, "the merged view with "+svm.String(), func() error {
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
	d := dyn(t, cfg)
	waitFor(t, time.Minute, "reading StorageVersionMigrations through server 0", func() error {
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

func ownAPIs(t *testing.T) []apidiscoveryv2.APIGroupDiscovery {
	g, _, _ := discovery(t, old, "/apis", true)
	return g
}
