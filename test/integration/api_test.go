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
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	informers "sigs.k8s.io/peerdiscovery/pkg/generated/informers/externalversions"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

func TestReadinessFollowsTheView(t *testing.T) {
	ts := startServer(t)
	code, body := ts.get(t, ts.anonymous(), "/readyz")
	if code == http.StatusOK {
		t.Fatalf("ready before any view was published: %s", body)
	}
	if err := ts.srv.Publisher.Publish(view(0, true)); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, 30*time.Second, "ready after publish", func() error {
		if code, body := ts.get(t, ts.anonymous(), "/readyz"); code != http.StatusOK {
			return errorf("readyz %d: %s", code, body)
		}
		return nil
	})
	ts.clock.Step(2 * time.Minute) // past StaleAfter with no new view
	code, body = ts.get(t, ts.anonymous(), "/readyz?verbose")
	if code == http.StatusOK || !strings.Contains(body, "peerdiscovery-view") {
		t.Fatalf("stale view still ready: %d %s", code, body)
	}
}

func TestListGetWatchSelectors(t *testing.T) {
	ts := startServer(t)
	ctx := context.Background()
	if err := ts.srv.Publisher.Publish(view(10, true)); err != nil {
		t.Fatal(err)
	}
	c := ts.clientset(t, ts.admin()).PeerdiscoveryV1alpha1()

	list, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(list.Items); got != 12 { // apps deployments, deviceclasses, 10 things
		t.Fatalf("routing tables: got %d, want 12", got)
	}
	rt, err := c.PeerRoutingTables().Get(ctx, "deviceclasses.v1beta2.resource.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Status.ServedByAll || len(rt.Status.Peers) != 1 || rt.Status.Peers[0].ServerID != "kube-apiserver-a" || rt.UID == "" {
		t.Fatalf("unexpected routing table: %+v", rt)
	}
	if _, err := c.PeerRoutingTables().Get(ctx, "nope.v1.core", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get of a missing table: %v, want NotFound", err)
	}

	// Field selectors: the GVRs not served by every peer, one group, one resource.
	notAll, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "status.servedByAll=false"})
	if err != nil {
		t.Fatal(err)
	}
	if len(notAll.Items) != 11 {
		t.Fatalf("servedByAll=false: got %d, want 11", len(notAll.Items))
	}
	apps, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "spec.group=apps,spec.resource=deployments"})
	if err != nil {
		t.Fatal(err)
	}
	if len(apps.Items) != 1 || !apps.Items[0].Status.ServedByAll {
		t.Fatalf("apps deployments: %+v", apps.Items)
	}
	if _, err := c.PeerRoutingTables().List(ctx, metav1.ListOptions{FieldSelector: "status.bogus=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector: %v, want BadRequest", err)
	}
	if err := ts.srv.Publisher.Publish(view(10, false)); err != nil {
		t.Fatal(err)
	}
	notReady, err := c.APIServerPeers().List(ctx, metav1.ListOptions{FieldSelector: "status.ready=false"})
	if err != nil {
		t.Fatal(err)
	}
	if len(notReady.Items) != 1 || notReady.Items[0].Spec.ServerID != "kube-apiserver-b" {
		t.Fatalf("not-ready peers: %+v", notReady.Items)
	}

	// Watch from a resourceVersion replays exactly what came after it.
	list, err = c.PeerRoutingTables().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Publisher.Publish(view(11, false)); err != nil { // adds things0010
		t.Fatal(err)
	}
	w, err := c.PeerRoutingTables().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := next(t, w)
	if ev.Type != watch.Added || ev.Object.(*v1alpha1.PeerRoutingTable).Name != "things0010.v1.example.com" {
		t.Fatalf("replayed event: %s %v", ev.Type, ev.Object)
	}

	// An expired (or other replica's) resourceVersion is 410 Gone.
	_, err = c.PeerRoutingTables().Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from a foreign resourceVersion: %v, want 410", err)
	}
	// A future one of this replica is the standard "too large" error.
	var rv uint64
	if _, err := fmtSscan(list.ResourceVersion, &rv); err != nil {
		t.Fatal(err)
	}
	_, err = c.PeerRoutingTables().List(ctx, metav1.ListOptions{ResourceVersion: u64(rv + 1000), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if !storage.IsTooLargeResourceVersion(err) {
		t.Fatalf("list at a future resourceVersion: %v, want too large", err)
	}

	// Writes are not served: the storage implements no write verb, so the
	// endpoint installer answers 405 to an admin allowed everything.
	err = c.RESTClient().Delete().Resource("peerroutingtables").Name("deployments.v1.apps").Do(ctx).Error()
	if !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("delete: %v, want 405 Method Not Allowed", err)
	}
}

func TestWatchListBookmarkAndInformer(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ts.srv.Publisher.Publish(view(3, true)); err != nil {
		t.Fatal(err)
	}
	cs := ts.clientset(t, ts.admin())
	w, err := cs.PeerdiscoveryV1alpha1().PeerRoutingTables().Watch(ctx, metav1.ListOptions{
		SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for {
		ev := next(t, w)
		if ev.Type == watch.Added {
			added++
			continue
		}
		if ev.Type != watch.Bookmark {
			t.Fatalf("unexpected %s before the initial-events-end bookmark", ev.Type)
		}
		m, _ := metaAccessor(ev.Object)
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			t.Fatalf("bookmark without %s: %v", metav1.InitialEventsAnnotationKey, m.GetAnnotations())
		}
		break
	}
	w.Stop()
	if added != 5 {
		t.Fatalf("initial events: got %d, want 5", added)
	}

	// A shared informer (WatchList on) syncs and follows changes.
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Peerdiscovery().V1alpha1().PeerRoutingTables()
	lister := inf.Lister()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("informer did not sync")
	}
	if items, _ := lister.List(everything()); len(items) != 5 {
		t.Fatalf("informer cache: %d items, want 5", len(items))
	}
	if err := ts.srv.Publisher.Publish(view(4, true)); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, 30*time.Second, "informer sees the new table", func() error {
		if _, err := lister.Get("things0003.v1.example.com"); err != nil {
			return err
		}
		return nil
	})
}
