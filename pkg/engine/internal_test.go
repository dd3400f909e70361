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

package engine

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func TestSliceEndpoints(t *testing.T) {
	s := kubernetesSlice("kubernetes", 6443, "10.0.0.1", "10.0.0.2", "not-an-ip", "10.0.0.4")
	s.Endpoints[1].Conditions.Ready = ptr.To(false) // not ready: skipped
	s.Endpoints[3].Conditions.Ready = nil           // unknown: counts as ready
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"FD00:0::1"}})
	got := sliceEndpoints(s)
	if want := []string{"10.0.0.1:6443", "10.0.0.4:6443", "[fd00::1]:6443"}; !slices.Equal(got, want) {
		t.Errorf("sliceEndpoints = %v, want %v", got, want)
	}

	unnamed := kubernetesSlice("kubernetes", 443, "10.0.0.1")
	unnamed.Ports[0].Name = nil
	if got := sliceEndpoints(unnamed); !slices.Equal(got, []string{"10.0.0.1:443"}) {
		t.Errorf("unnamed port: %v", got)
	}
	other := kubernetesSlice("kubernetes", 443, "10.0.0.1")
	other.Ports[0].Name = ptr.To("metrics")
	if got := sliceEndpoints(other); got != nil {
		t.Errorf("no https port: %v", got)
	}
}

func TestPeerCA(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "peer-ca.crt")
	if err := os.WriteFile(file, []byte("from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfigCA := filepath.Join(dir, "kubeconfig-ca.crt")
	if err := os.WriteFile(kubeconfigCA, []byte("from-kubeconfig-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		cfg        rest.Config
		want       string
	}{
		{"--peer-ca-file wins", file, rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte("inline")}}, "from-file"},
		{"kubeconfig CA data", "", rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte("inline")}}, "inline"},
		{"kubeconfig CA file", "", rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: kubeconfigCA}}, "from-kubeconfig-file"},
		{"none", "", rest.Config{}, ""},
		{"missing file", filepath.Join(dir, "missing"), rest.Config{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := peerCA(tc.file, &tc.cfg)
			if tc.want == "" {
				if err == nil {
					t.Errorf("peerCA = %q, want an error", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("peerCA = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Without a ScrapeFunc, Complete builds the real scraper from the peer CA.
func TestNewBuildsScraper(t *testing.T) {
	opts := testOptions()
	cfg := &rest.Config{BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: testPKI(t).ca.CertPEM}}
	e, err := newEngine(Config{Options: opts, Publisher: newRecordingPublisher(), RESTConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if e.scrape == nil || e.recorder != nil {
		t.Errorf("engine: scrape %v recorder %v", e.scrape != nil, e.recorder)
	}
	if _, err := newEngine(Config{Options: opts, Publisher: newRecordingPublisher(), RESTConfig: &rest.Config{}}); err == nil {
		t.Error("Complete without any peer CA succeeded")
	}
}

// An engine that is built but never run (the server's New failed after
// it, or it never started) holds no goroutine: the Event broadcaster is
// started by Run.
func TestNewStartsNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	fs := newFakeScraper()
	for range 5 {
		if _, err := newEngine(Config{Options: testOptions(), Clients: Clients{Kube: fake.NewClientset()}, Publisher: newRecordingPublisher(), Scrape: fs.Scrape, Heartbeat: fs.Heartbeat}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a goroutine started by New would be running by now
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines before building five engines, %d after", before, after)
	}
}
