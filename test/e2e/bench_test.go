package e2e

import (
	"context"
	"net/http"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// BenchmarkGetProxiedVsDirect measures a GET of one StorageVersionMigration
// directly on a v1.37.2 server and through the v1.36.3 server (proxied by
// the filter), on the same control plane in the same run, and reports p50
// and p99 besides ns/op. Run:
//
//	PEERDISCOVERY_E2E=1 go test -run '^$' -bench GetProxiedVsDirect -benchtime 2000x ./test/e2e
func BenchmarkGetProxiedVsDirect(b *testing.B) {
	if cluster == nil {
		b.Skip("set PEERDISCOVERY_E2E=1")
	}
	ctx := context.Background()
	d, err := dynForBench(new1)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.Create(ctx, newSVM("e2e-bench"), metav1.CreateOptions{}); err != nil {
		b.Log(err)
	}
	path := svmPath + "/e2e-bench"
	for _, tc := range []struct {
		name   string
		server int
	}{{"direct", new1}, {"proxied", old}, {"direct", new1}, {"proxied", old}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := cluster.AdminConfig(tc.server)
			client, err := rest.HTTPClientFor(cfg)
			if err != nil {
				b.Fatal(err)
			}
			get := func() time.Duration {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodGet, cfg.Host+path, nil)
				req.Header.Set("Accept", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				drain(resp)
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("GET via server %d: %d", tc.server, resp.StatusCode)
				}
				return time.Since(start)
			}
			for i := 0; i < 20; i++ { // warm the connections
				get()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				lat = append(lat, get())
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

func drain(resp *http.Response) {
	buf := make([]byte, 32<<10)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
	}
	resp.Body.Close()
}
