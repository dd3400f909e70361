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

// Package crdchurn creates 1,000 CRDs in batches and deletes them again on a
// real control plane (etcd, kube-apiserver v1.36.3 and v1.37.2 with the
// filter, two peerdiscovery-apiserver replicas behind the APIService), and
// reports memory over the run and the filters' relists. It runs only on
// demand (PEERDISCOVERY_SCALE_E2E=1 hack/test-crd-churn.sh): it takes about
// ten minutes on two cores, more than CI's budget allows next to the rest.
package crdchurn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/generated/clientset/versioned"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

const (
	crds      = 1000
	batchSize = 50
	group     = "churn.example.com"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Gate:         "PEERDISCOVERY_SCALE_E2E",
		Skipped:      "the CRD churn test runs on demand: PEERDISCOVERY_SCALE_E2E=1 (hack/test-crd-churn.sh)",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			return localcluster.Config{
				Servers:           []localcluster.ServerSpec{{Version: "v1.36.3"}, {Version: "v1.37.2"}},
				ExtensionReplicas: 2,
				ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
				SubnetOctet:       83,
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

func crd(i int) *apiextensionsv1.CustomResourceDefinition {
	return planetest.CRD(group, fmt.Sprintf("widgets%04d", i), fmt.Sprintf("Widget%04d", i), apiextensionsv1.NamespaceScoped, map[string]string{"test": "crdchurn"})
}

// scrape returns the named metrics' values (summed over label sets).
func scrape(cfg *rest.Config, names ...string) (map[string]float64, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	resp, err := client.Get(strings.TrimSuffix(cfg.Host, "/") + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, name := range names {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
		for _, m := range re.FindAllStringSubmatch(string(body), -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[name] += v
		}
	}
	return out, nil
}

// rssSeries samples process_resident_memory_bytes of every component.
type rssSeries struct {
	mu      sync.Mutex
	samples map[string][]float64
}

func (r *rssSeries) sample() {
	targets := map[string]*rest.Config{}
	for i, s := range cluster.Servers() {
		targets[s.Name+" ("+s.Version+")"] = cluster.AdminConfig(i)
	}
	for i, e := range cluster.Extensions() {
		targets[e.Name] = cluster.ExtensionConfig(i)
	}
	for name, cfg := range targets {
		m, err := scrape(cfg, "process_resident_memory_bytes")
		if err != nil {
			continue // a sample missed is not a failure; the report shows the count
		}
		r.mu.Lock()
		r.samples[name] = append(r.samples[name], m["process_resident_memory_bytes"])
		r.mu.Unlock()
	}
}

func (r *rssSeries) report(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.samples))
	for n := range r.samples {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := r.samples[n]
		if len(s) == 0 {
			continue
		}
		lo, hi := s[0], s[0]
		for _, v := range s {
			lo, hi = min(lo, v), max(hi, v)
		}
		t.Logf("RSS %-36s first %4.0f MiB, min %4.0f, max %4.0f, last %4.0f (%d samples)",
			n, s[0]/(1<<20), lo/(1<<20), hi/(1<<20), s[len(s)-1]/(1<<20), len(s))
	}
}

func relists(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for i := range cluster.Servers() {
		m, err := scrape(cluster.AdminConfig(i), "peerdiscovery_filter_relists_total")
		if err != nil {
			t.Fatalf("metrics of server %d: %v", i, err)
		}
		sum += m["peerdiscovery_filter_relists_total"]
	}
	return sum
}

// churnTables counts the routing tables of the churn group, as every
// replica serves them.
func churnTables(t *testing.T, replica int) (int, error) {
	t.Helper()
	pd, err := versioned.NewForConfig(cluster.ExtensionConfig(replica))
	if err != nil {
		return 0, err
	}
	l, err := pd.PeerdiscoveryV1alpha1().PeerRoutingTables().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.group=" + group})
	if err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

func waitTables(t *testing.T, want int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		a, errA := churnTables(t, 0)
		b, errB := churnTables(t, 1)
		if errA == nil && errB == nil && a == want && b == want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("routing tables of %s: replica 0 %d (%v), replica 1 %d (%v), want %d after %v", group, a, errA, b, errB, want, timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

func TestCRDChurn(t *testing.T) {
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_SCALE_E2E=1")
	}
	ext, err := apiextensionsclient.NewForConfig(cluster.AdminConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()

	rss := &rssSeries{samples: map[string][]float64{}}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			rss.sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-sampled
	}()

	before, began := relists(t), time.Now()
	start := time.Now()
	for b := 0; b < crds; b += batchSize {
		for i := b; i < b+batchSize; i++ {
			if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd(i), metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating CRD %d: %v", i, err)
			}
		}
		t.Logf("%d CRDs created (%v)", b+batchSize, time.Since(start).Round(time.Second))
	}
	created := time.Since(start)
	settle := waitTables(t, crds, 15*time.Minute)
	t.Logf("1,000 CRDs created in %v; both replicas served their 1,000 routing tables %v later", created.Round(time.Second), settle.Round(time.Second))

	start = time.Now()
	for b := 0; b < crds; b += batchSize {
		for i := b; i < b+batchSize; i++ {
			err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd(i).Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("deleting CRD %d: %v", i, err)
			}
		}
	}
	deleted := time.Since(start)
	settle = waitTables(t, 0, 15*time.Minute)
	t.Logf("1,000 CRDs deleted in %v; their routing tables gone %v later", deleted.Round(time.Second), settle.Round(time.Second))

	close(stop)
	<-sampled
	rss.report(t)
	after := relists(t)
	t.Logf("filter relists after the first sync: %v during the run (sum over both kube-apiservers)", after-before)
	// A filter's watch that client-go renews (every 5-10 minutes) on the
	// other replica relists there (410: the replicas' resourceVersions are
	// their own), so at most one relist per informer and 5 minutes; the
	// churn itself (history, slow watchers) must add none.
	renewals := len(cluster.Servers()) * 3 * int(time.Since(began)/(5*time.Minute)+1)
	if after-before > float64(renewals) {
		t.Errorf("the filters relisted %v times during the churn; watch renewals on the other replica explain at most %d", after-before, renewals)
	}
}
