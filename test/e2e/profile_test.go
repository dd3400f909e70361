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
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// TestProfileProxiedGet records a CPU profile of the v1.36.3 server while it
// proxies GETs, for looking at the proxied path's cost. Opt-in:
// PEERDISCOVERY_PROFILE=1; the profile lands in _output/.
func TestProfileProxiedGet(t *testing.T) {
	if os.Getenv("PEERDISCOVERY_PROFILE") != "1" {
		t.Skip("set PEERDISCOVERY_PROFILE=1")
	}
	readyPlane(t)
	d := planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm)
	_, _ = d.Create(t.Context(), newSVM("e2e-profile"), metav1.CreateOptions{})
	t.Cleanup(func() { _ = d.Delete(context.Background(), "e2e-profile", metav1.DeleteOptions{}) })
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
	code, _, body := planetest.Get(t, cfg, "/debug/pprof/profile?seconds=10")
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
