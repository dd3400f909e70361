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

// Portions of this file follow Kubernetes code (Copyright The Kubernetes
// Authors, Apache License 2.0), as named where they do.

// Command bareproxy is the least a proxy between kube-apiservers can do:
// terminate TLS, forward every request to one peer over a pooled TLS
// connection with the front-proxy client certificate and a fixed identity,
// and copy the response back. It authenticates and authorizes nothing, so
// it is a test tool only: the end-to-end benchmark runs it inside the
// control plane's network namespace to measure the floor of any proxied
// path on the machine, beside the filter's.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
)

func main() {
	listen := flag.String("listen", "", "host:port to serve on")
	certFile := flag.String("tls-cert-file", "", "serving certificate")
	keyFile := flag.String("tls-private-key-file", "", "serving key")
	target := flag.String("target", "", "host:port of the peer kube-apiserver")
	caFile := flag.String("peer-ca-file", "", "CA of the peer's serving certificate")
	clientCert := flag.String("proxy-client-cert-file", "", "front-proxy client certificate")
	clientKey := flag.String("proxy-client-key-file", "", "front-proxy client key")
	userName := flag.String("user", "", "X-Remote-User sent to the peer")
	groups := flag.String("groups", "", "comma-separated X-Remote-Group values sent to the peer")
	flag.Parse()
	if err := run(*listen, *certFile, *keyFile, *target, *caFile, *clientCert, *clientKey, *userName, *groups); err != nil {
		fmt.Fprintln(os.Stderr, "bareproxy:", err)
		os.Exit(1)
	}
}

func run(listen, certFile, keyFile, target, caFile, clientCert, clientKey, userName, groups string) error {
	if listen == "" || target == "" || userName == "" {
		return fmt.Errorf("--listen, --target and --user are required")
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%s: no certificates", caFile)
	}
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		return err
	}
	// The filter's transport settings (filter.(*proxier).newTransport): pooled, HTTP/2.
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			RootCAs:      pool,
			Certificates: []tls.Certificate{pair},
			NextProtos:   []string{"h2", "http/1.1"},
		},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
	}
	peer := &url.URL{Scheme: "https", Host: target}
	proxy := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(peer)
			r.Out.Host = peer.Host
			for name := range r.Out.Header {
				if strings.HasPrefix(name, "X-Remote-") {
					r.Out.Header.Del(name)
				}
			}
			r.Out.Header.Set("X-Remote-User", userName)
			for _, g := range strings.Split(groups, ",") {
				if g != "" {
					r.Out.Header.Add("X-Remote-Group", g)
				}
			}
			// As the filter does: the peer serves it, never proxies it on.
			r.Out.Header.Set("X-Kubernetes-Peer-Proxied", "true")
		},
	}
	server := &http.Server{Addr: listen, Handler: proxy, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	return server.ListenAndServeTLS(certFile, keyFile)
}
