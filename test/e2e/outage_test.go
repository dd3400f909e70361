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
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestWatchPeerLeaveAndReturn: kubectl get -w apiserverpeers shows a
// v1.37.2 server leave when it stops and come back when it starts.
func TestWatchPeerLeaveAndReturn(t *testing.T) {
	readyPlane(t)
	planetest.KeepServersRunning(t, cluster, new2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	// kubectl get -w ends when the server ends the watch (as any watch may
	// be ended); like an informer, start it again.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, cluster.KubectlBinary(), "--kubeconfig", cluster.Kubeconfig(), "--cache-dir", cluster.KubectlCacheDir(),
				"--context", cluster.Servers()[new1].Context, "get", "apiserverpeers", "-w")
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run()
			if ctx.Err() == nil {
				fmt.Fprintf(&out, "(kubectl get -w ended; restarting)\n")
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	defer func() { cancel(); <-done }()
	ip := cluster.Servers()[new2].IP
	rowWith := func(ready string) func() error {
		return func() error {
			for _, l := range strings.Split(out.String(), "\n") {
				f := strings.Fields(l)
				if len(f) > 3 && strings.HasPrefix(f[1], ip+":") && f[3] == ready {
					return nil
				}
			}
			return fmt.Errorf("no %s row for %s yet:\n%s", ready, ip, out.String())
		}
	}
	planetest.WaitFor(t, 30*time.Second, "initial row", rowWith("True"))
	if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, time.Minute, "kubectl get -w shows the peer leave", rowWith("False"))
	n := len(out.String())
	if err := cluster.StartAPIServer(new2); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, 2*time.Minute, "kubectl get -w shows the peer back", func() error {
		tail := out.String()[n:]
		for _, l := range strings.Split(tail, "\n") {
			f := strings.Fields(l)
			if len(f) > 3 && strings.HasPrefix(f[1], ip+":") && f[3] == "True" {
				return nil
			}
		}
		return fmt.Errorf("not back yet")
	})
}

// TestLoadWhileCapableServerKilled: a bounded load through the
// non-capable server loses no request while one of two capable servers is
// killed.
func TestLoadWhileCapableServerKilled(t *testing.T) {
	ids := readyPlane(t)
	planetest.KeepServersRunning(t, cluster, new2)
	const total, workers = 400, 4
	var done, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	cfg := cluster.AdminConfig(old)
	var wg sync.WaitGroup
	jobs := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				code, _, body := planetest.Get(t, cfg, svmPath)
				done.Add(1)
				if code != http.StatusOK {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%d %.200s", code, body))
					mu.Unlock()
				}
			}
		}()
	}
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; i < total && time.Now().Before(deadline); i++ {
		if i == total/4 {
			if err := cluster.StopAPIServer(new2, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("load through v1.36.3 while a capable v1.37.2 was killed: %d requests, %d failed", done.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Fatalf("lost %d requests: %v", failed.Load(), failures)
	}
	if err := cluster.StartAPIServer(new2); err != nil {
		t.Fatal(err)
	}
	waitReadyPeer(t, ids[new2])
}

// TestOnlyCapableServersStopped: with every server that serves the GVR
// stopped, the old server answers 503 — never 404; no Retry-After once its
// view shows them not ready — for the whole observation, which spans the registration Leases lapsing.
func TestOnlyCapableServersStopped(t *testing.T) {
	ids := readyPlane(t)
	planetest.KeepServersRunning(t, cluster, new1, new2)
	if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StopAPIServer(new1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cfg := cluster.AdminConfig(old)
	saw503 := 0
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		code, h, body := planetest.Get(t, cfg, svmPath)
		switch code {
		case http.StatusNotFound:
			t.Fatalf("404 for a GVR whose servers are down: %s", body)
		case http.StatusServiceUnavailable:
			saw503++
			if err := planetest.Check503(h, body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if saw503 == 0 {
		t.Fatal("never saw 503")
	}
	if r := review(t, old, "get", svmPath, ids[old]); r.Decision != v1alpha1.RouteUnavailable {
		t.Fatalf("RouteReview while the capable servers are down: %+v", r)
	}
	for _, i := range []int{new1, new2} {
		if err := cluster.StartAPIServer(i); err != nil {
			t.Fatal(err)
		}
	}
	waitReadyPeer(t, ids[new1])
	waitReadyPeer(t, ids[new2])
	planetest.WaitFor(t, time.Minute, "svm served through v1.36.3 again", func() error {
		if code, _, body := planetest.Get(t, cfg, svmPath); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// TestExtensionServersStopped: with every peerdiscovery-apiserver replica
// down, the filters route from their caches, and a server restarted
// meanwhile routes by the registration Leases, never a 404; restarted,
// the replicas resync them.
func TestExtensionServersStopped(t *testing.T) {
	readyPlane(t)
	planetest.KeepExtensionsRunning(t, cluster)
	planetest.KeepServersRunning(t, cluster, old)
	stopExtensions(t)
	cfg := cluster.AdminConfig(old)
	for i := 0; i < 20; i++ {
		if code, _, body := planetest.Get(t, cfg, svmPath); code != http.StatusOK {
			t.Fatalf("routing without peerdiscovery-apiserver: %d %s", code, body)
		}
	}
	// The old server restarted now has empty routing caches and cannot
	// fill them, but its own watch of the registration Leases shows which
	// live servers serve what it does not: it proxies there from its
	// first seconds (a 503 "not synced yet" only until that watch synced,
	// never a false 404); what it serves stays local.
	if err := cluster.StopAPIServer(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServer(old); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	planetest.WaitFor(t, 10*time.Second, "proxied by the Lease records", func() error {
		code, h, body := planetest.Get(t, cfg, svmPath)
		switch {
		case code == http.StatusOK:
			return nil
		case code == http.StatusServiceUnavailable && h.Get("Retry-After") != "" && strings.Contains(string(body), "not synced yet"):
			return fmt.Errorf("%d %s", code, body)
		}
		t.Fatalf("restarted without peerdiscovery-apiserver: %d %s, want 200 (or 503 with Retry-After until its Lease watch synced)", code, body)
		return nil
	})
	t.Logf("restarted without peerdiscovery-apiserver: proxied by the Lease records %v after the start returned", time.Since(started).Round(10*time.Millisecond))
	for i := 0; i < 10; i++ {
		if code, _, body := planetest.Get(t, cfg, svmPath); code != http.StatusOK {
			t.Fatalf("restarted without peerdiscovery-apiserver: %d %s, want 200", code, body)
		}
	}
	if code, _, body := planetest.Get(t, cfg, "/api/v1/namespaces/default"); code != http.StatusOK {
		t.Fatalf("a local GET on the restarted server: %d %s", code, body)
	}
	startExtensions(t, allExtensions()...)
	planetest.WaitFor(t, time.Minute, "filter caches resynced", func() error {
		if !planetest.FilterSynced(t, cluster, old) {
			return fmt.Errorf("not synced")
		}
		if code, _, body := planetest.Get(t, cfg, svmPath); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// TestLeaseRecordedButUnrouted: a resource that only a live server's
// registration Lease records, and no routing view knows yet, is proxied to
// it through every other server (its discovery document, which only the
// view can build, is a 503), never a 404. Here the view
// cannot know it: every peerdiscovery-apiserver replica is stopped, and
// new2 comes back serving one more group-version. In CI a lagging replica
// did the same to a just-upgraded server for 27 s (test/nodeplane).
func TestLeaseRecordedButUnrouted(t *testing.T) {
	readyPlane(t)
	planetest.KeepExtensionsRunning(t, cluster)
	const (
		extra = "resource.k8s.io/v1beta2" // off by default in both releases, no feature gate
		path  = "/apis/" + extra + "/deviceclasses"
	)
	version := cluster.Servers()[new2].Version
	restart := func(flags ...string) {
		t.Helper()
		if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cluster.UpgradeAPIServer(new2, localcluster.ServerSpec{Version: version, ExtraFlags: flags}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// new2 as it was, and the view resynced, for the tests after.
		if err := cluster.StopAPIServer(new2, syscall.SIGTERM); err != nil {
			t.Errorf("stopping %s: %v", cluster.Servers()[new2].Name, err)
		}
		if err := cluster.UpgradeAPIServer(new2, localcluster.ServerSpec{Version: version}); err != nil {
			t.Errorf("starting %s as it was: %v", cluster.Servers()[new2].Name, err)
		}
	})
	stopExtensions(t)
	cfg := cluster.AdminConfig(old)
	if code, _, b := planetest.Get(t, cfg, path); code != http.StatusNotFound {
		t.Fatalf("before new2 serves %s: %d %.200s, want 404 (no server serves it)", extra, code, b)
	}
	restart("--runtime-config=" + extra + "=true")
	groups, _, _ := discovery(t, new2, "/apis", true)
	served := planetest.GVRs(groups)
	if !served[schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta2", Resource: "deviceclasses"}] {
		t.Fatalf("%s does not serve %s with --runtime-config=%s=true: the API this test needs is gone", cluster.Servers()[new2].Name, path, extra)
	}
	// Within a renewal (5 s) of new2's first read of its own discovery, its
	// Lease records it; from then on old proxies it there, with no view at
	// all (every replica is down), by what new2's Lease records.
	planetest.WaitFor(t, 30*time.Second, "proxied through "+cluster.Servers()[old].Name+" without a view", func() error {
		code, _, b := planetest.Get(t, cfg, path)
		if code != http.StatusOK {
			return fmt.Errorf("%d %.200s", code, b)
		}
		return nil
	})
	for i := 0; i < 10; i++ {
		if code, _, b := planetest.Get(t, cfg, path); code != http.StatusOK {
			t.Fatalf("GET %s through %s: %d %.300s, want 200 (proxied by new2's Lease record)", path, cluster.Servers()[old].Name, code, b)
		}
	}
	// Its discovery document is built from the view: 503, never 404.
	if code, _, b := planetest.Get(t, cfg, "/apis/"+extra); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /apis/%s through %s: %d %.300s, want 503", extra, cluster.Servers()[old].Name, code, b)
	}
	// The replicas back: routed to new2.
	startExtensions(t, allExtensions()...)
	planetest.WaitFor(t, time.Minute, "proxied to "+cluster.Servers()[new2].Name, func() error {
		code, _, b := planetest.Get(t, cfg, path)
		if code != http.StatusOK {
			return fmt.Errorf("%d %.200s", code, b)
		}
		return nil
	})
}

// stopExtensions stops every peerdiscovery-apiserver replica and waits
// until peerdiscovery.k8s.io is no longer served.
func stopExtensions(t *testing.T) {
	t.Helper()
	for i := range cluster.Extensions() {
		if err := cluster.StopExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cluster.AdminConfig(old)
	planetest.WaitFor(t, time.Minute, "peerdiscovery.k8s.io unavailable", func() error {
		if code, _, _ := planetest.Get(t, cfg, "/apis/peerdiscovery.k8s.io/v1alpha1/peerroutingtables"); code == http.StatusOK {
			return fmt.Errorf("still served")
		}
		return nil
	})
}
