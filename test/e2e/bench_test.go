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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/pki"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// BenchmarkGetProxiedVsDirect measures a GET of one StorageVersionMigration
// on the same control plane in the same run, three ways:
//
//   - direct: on a v1.37.2 server, which serves it;
//   - proxied: through the v1.36.3 server, where the filter proxies it to a
//     v1.37.2 server after kube-apiserver's own chain (authentication,
//     priority and fairness, authorization);
//   - bare-proxy: through test/e2e/bareproxy, a reverse proxy with nothing
//     but TLS and HTTP, run in the same network namespace: the floor of
//     any proxied path on this machine.
//
// Each iteration makes one GET of each, in turn, so drift on the machine
// hits the three alike. It reports p50 and p99 of each and the p50 ratios
// to direct. Run:
//
//	PEERDISCOVERY_E2E=1 go test -run '^$' -bench GetProxiedVsDirect -benchtime 3000x ./test/e2e
func BenchmarkGetProxiedVsDirect(b *testing.B) {
	if cluster == nil {
		b.Skip("set PEERDISCOVERY_E2E=1")
	}
	ctx := context.Background()
	d := planetest.Dynamic(b, cluster.AdminConfig(new1)).Resource(svm)
	if _, err := d.Create(ctx, newSVM("e2e-bench"), metav1.CreateOptions{}); err != nil {
		b.Log(err)
	}
	b.Cleanup(func() { _ = d.Delete(context.Background(), "e2e-bench", metav1.DeleteOptions{}) })
	path := svmPath + "/e2e-bench"
	bare := startBareProxy(b, new1)
	paths := []struct {
		name string
		cfg  *rest.Config
	}{
		{"direct", cluster.AdminConfig(new1)},
		{"proxied", cluster.AdminConfig(old)},
		{"bare-proxy", bare},
	}
	gets := make([]func() time.Duration, len(paths))
	for i, p := range paths {
		client, err := rest.HTTPClientFor(p.cfg)
		if err != nil {
			b.Fatal(err)
		}
		// Until the filter's routing caches are synced, the proxied GET
		// answers 503.
		deadline := time.Now().Add(2 * time.Minute)
		for code, _ := get(client, p.cfg.Host+path); code != http.StatusOK; code, _ = get(client, p.cfg.Host+path) {
			if time.Now().After(deadline) {
				b.Fatalf("GET %s: %d after 2m", p.name, code)
			}
			time.Sleep(200 * time.Millisecond)
		}
		gets[i] = func() time.Duration {
			start := time.Now()
			if code, _ := get(client, p.cfg.Host+path); code != http.StatusOK {
				b.Fatalf("GET %s: %d", p.name, code)
			}
			return time.Since(start)
		}
		for range 20 { // warm the connections
			gets[i]()
		}
	}
	lat := make([][]time.Duration, len(paths))
	b.ResetTimer()
	for range b.N {
		for i := range paths {
			lat[i] = append(lat[i], gets[i]())
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(paths))
	for i, p := range paths {
		l := lat[i]
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		p50[i] = l[len(l)/2]
		b.ReportMetric(float64(p50[i].Microseconds()), p.name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), p.name+"-p99-µs")
	}
	for i := 1; i < len(paths); i++ {
		b.ReportMetric(float64(p50[i])/float64(p50[0]), paths[i].name+"/direct-p50")
	}
}

// TestBareProxy checks the benchmark's floor proxy: a GET through it
// returns what the server it fronts returns.
func TestBareProxy(t *testing.T) {
	readyPlane(t)
	name := "e2e-bareproxy"
	d := planetest.Dynamic(t, cluster.AdminConfig(new1)).Resource(svm)
	if _, err := d.Create(t.Context(), newSVM(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	codeDirect, _, direct := planetest.Get(t, cluster.AdminConfig(new1), svmPath+"/"+name)
	codeBare, _, viaBare := planetest.Get(t, startBareProxy(t, new1), svmPath+"/"+name)
	if codeDirect != http.StatusOK || codeBare != http.StatusOK || string(direct) != string(viaBare) {
		t.Fatalf("direct %d %s\nbare proxy %d %s", codeDirect, direct, codeBare, viaBare)
	}
}

// startBareProxy builds test/e2e/bareproxy and runs it inside the control
// plane's network namespace in front of server target, forwarding as the
// admin user; it returns a client config for it. It stops with the test.
func startBareProxy(tb testing.TB, target int) *rest.Config {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "bareproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "./bareproxy").CombinedOutput(); err != nil {
		tb.Fatalf("building bareproxy: %v\n%s", err, out)
	}
	ip := net.ParseIP(cluster.HelperAddress())
	ca, err := pki.NewCA("bareproxy-ca")
	if err != nil {
		tb.Fatal(err)
	}
	serving, err := ca.NewServingCert("bareproxy", nil, []net.IP{ip})
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, serving.CertPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, serving.KeyPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	admin := cluster.AdminConfig(target)
	fpCert, fpKey := cluster.FrontProxyClientFiles()
	listen := net.JoinHostPort(ip.String(), "7443")
	stop, err := cluster.RunInNetwork("bareproxy", bin,
		"--listen="+listen,
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile,
		"--target="+strings.TrimPrefix(admin.Host, "https://"),
		"--peer-ca-file="+cluster.CAFile(),
		"--proxy-client-cert-file="+fpCert, "--proxy-client-key-file="+fpKey,
		"--user=local-admin", "--groups=system:masters")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = stop() })
	cfg := rest.CopyConfig(admin)
	cfg.Host = "https://" + listen
	cfg.CAData = ca.CertPEM
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, err := get(client, cfg.Host+"/livez")
		if err == nil && code == http.StatusOK {
			return cfg
		}
		if time.Now().After(deadline) {
			tb.Fatalf("bareproxy did not serve /livez within 30s (last: %d %v); log %s", code, err, filepath.Join(cluster.RunDir(), "logs", "bareproxy.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// get GETs url as JSON and reads the whole response.
func get(client *http.Client, url string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	drain(resp)
	return resp.StatusCode, nil
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
