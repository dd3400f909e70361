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

// Command stubapi is the backend of many aggregated APIServices for the
// bench (test/bench): it serves the discovery of --groups group-versions
// of --resources resources each, and empty OpenAPI documents, and nothing
// else. A resource costs a kube-apiserver almost nothing beyond its
// discovery entry, so it adds GVRs, cluster-wide ones as CRDs are, where
// thousands of CRDs would not fit in the machine's memory. Only
// kube-apiservers reach it: it requires a client certificate of the
// front-proxy CA (the aggregator's proxy client).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

func main() {
	listen := flag.String("listen", "", "host:port to serve on")
	certFile := flag.String("tls-cert-file", "", "serving certificate")
	keyFile := flag.String("tls-private-key-file", "", "serving key")
	clientCA := flag.String("client-ca-file", "", "CA of the clients' certificates (the front-proxy CA)")
	groups := flag.Int("groups", 1, "group-versions to serve")
	resources := flag.Int("resources", 1, "resources per group-version")
	suffix := flag.String("group-suffix", "stub.bench.peerdiscovery.example.com", "groups are g<i>.<suffix>")
	resourcesFile := flag.String("resources-file", "", "a file whose number, when it appears or changes, replaces --resources (checked each second): an aggregated API's resources changing with no restart, which its APIService does not show")
	flag.Parse()
	if err := run(*listen, *certFile, *keyFile, *clientCA, *groups, *resources, *suffix, *resourcesFile); err != nil {
		fmt.Fprintln(os.Stderr, "stubapi:", err)
		os.Exit(1)
	}
}

// GroupName is the i-th group.
func GroupName(i int, suffix string) string { return fmt.Sprintf("g%03d.%s", i, suffix) }

func run(listen, certFile, keyFile, clientCA string, groups, resources int, suffix, resourcesFile string) error {
	if listen == "" || clientCA == "" || groups < 1 || resources < 1 {
		return fmt.Errorf("--listen and --client-ca-file are required, --groups and --resources at least 1")
	}
	caPEM, err := os.ReadFile(clientCA)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s: no certificates", clientCA)
	}
	first, err := newDocuments(groups, resources, suffix)
	if err != nil {
		return err
	}
	var current atomic.Pointer[documents]
	current.Store(first)
	if resourcesFile != "" {
		go followResources(resourcesFile, resources, func(n int) {
			d, err := newDocuments(groups, n, suffix)
			if err != nil {
				fmt.Fprintln(os.Stderr, "stubapi:", err)
				return
			}
			current.Store(d)
			fmt.Fprintf(os.Stderr, "stubapi: serving %d resources per group-version\n", n)
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/apis", func(w http.ResponseWriter, r *http.Request) {
		d := current.Load()
		if strings.Contains(r.Header.Get("Accept"), "as=APIGroupDiscoveryList") {
			w.Header().Set("Content-Type", discovery.AcceptV2)
			_, _ = w.Write(d.aggregated)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(d.legacy)
	})
	mux.HandleFunc("/apis/", func(w http.ResponseWriter, r *http.Request) {
		doc, ok := current.Load().byPath[strings.TrimSuffix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	mux.HandleFunc("/openapi/v2", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"swagger":"2.0","info":{"title":"stubapi","version":"v1"},"paths":{}}`)
	})
	mux.HandleFunc("/openapi/v3", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"paths":{}}`)
	})
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, "ok") })
	}
	server := &http.Server{
		Addr:              listen,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert},
	}
	return server.ListenAndServeTLS(certFile, keyFile)
}

// documents are what the stub serves at one resource count: the
// aggregated and legacy /apis, and each group's and group-version's
// document by path.
type documents struct {
	aggregated, legacy []byte
	byPath             map[string][]byte
}

func newDocuments(groups, resources int, suffix string) (*documents, error) {
	docs := map[string][]byte{}
	var err error
	var aggregated apidiscoveryv2.APIGroupDiscoveryList
	aggregated.APIVersion, aggregated.Kind = "apidiscovery.k8s.io/v2", "APIGroupDiscoveryList"
	legacy := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "APIGroupList"}}
	for g := range groups {
		group := GroupName(g, suffix)
		gv := group + "/v1"
		list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "APIResourceList"}, GroupVersion: gv}
		var rs []apidiscoveryv2.APIResourceDiscovery
		for r := range resources {
			plural, kind := fmt.Sprintf("things%04d", r), fmt.Sprintf("Thing%04d", r)
			verbs := []string{"get", "list", "watch"}
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: plural, SingularName: strings.TrimSuffix(plural, "s"), Kind: kind, Verbs: verbs})
			rs = append(rs, apidiscoveryv2.APIResourceDiscovery{Resource: plural, SingularResource: strings.TrimSuffix(plural, "s"),
				ResponseKind: &metav1.GroupVersionKind{Group: group, Version: "v1", Kind: kind}, Scope: apidiscoveryv2.ScopeCluster, Verbs: verbs})
		}
		if docs["/apis/"+gv], err = json.Marshal(list); err != nil {
			return nil, err
		}
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv, Version: "v1"}
		legacy.Groups = append(legacy.Groups, metav1.APIGroup{Name: group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v})
		if docs["/apis/"+group], err = json.Marshal(legacy.Groups[len(legacy.Groups)-1]); err != nil {
			return nil, err
		}
		aggregated.Items = append(aggregated.Items, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: group},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: rs, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}}})
	}
	legacyJSON, err := json.Marshal(legacy)
	if err != nil {
		return nil, err
	}
	aggregatedJSON, err := json.Marshal(aggregated)
	if err != nil {
		return nil, err
	}
	return &documents{aggregated: aggregatedJSON, legacy: legacyJSON, byPath: docs}, nil
}

// followResources calls serve with the number in path each time it
// appears or changes, checking each second for the process's life.
func followResources(path string, last int, serve func(int)) {
	for range time.Tick(time.Second) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 1 || n == last {
			continue
		}
		last = n
		serve(n)
	}
}
