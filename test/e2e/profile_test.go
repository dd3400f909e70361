package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestProfileProxiedGet records a CPU profile of the v1.36.3 server while it
// proxies GETs, for looking at the proxied path's cost. Opt-in:
// PEERDISCOVERY_PROFILE=1; the profile lands in _output/.
func TestProfileProxiedGet(t *testing.T) {
	needCluster(t)
	if os.Getenv("PEERDISCOVERY_PROFILE") != "1" {
		t.Skip("set PEERDISCOVERY_PROFILE=1")
	}
	d, err := dynForBench(new1)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = d.Create(t.Context(), newSVM("e2e-profile"), metav1CreateOptions())
	cfg := cluster.AdminConfig(old)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var n atomic.Int64
	go func() {
		for !stop.Load() {
			req, _ := http.NewRequest(http.MethodGet, cfg.Host+svmPath+"/e2e-profile", nil)
			if resp, err := client.Do(req); err == nil {
				drain(resp)
				n.Add(1)
			}
		}
	}()
	time.Sleep(time.Second)
	code, _, body := raw(t, cfg, http.MethodGet, "/debug/pprof/profile?seconds=10", nil)
	stop.Store(true)
	if code != http.StatusOK {
		t.Fatalf("profile: %d", code)
	}
	out := filepath.Join(cluster.RunDir(), "..", "..", "profile-proxied-old.pb.gz")
	if err := os.WriteFile(out, body, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d proxied GETs; profile in %s", n.Load(), out)
}
