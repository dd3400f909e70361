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

package filter

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// largeAnswerBytes is the size of the answer BenchmarkLargeAnswer reads:
// about a LIST of 8,000 objects of 1 KB.
const largeAnswerBytes = 8 << 20

// BenchmarkLargeAnswer reads a large short-running answer (written by the
// peer in 1 KiB pieces, as kube-apiserver's streaming list encoder writes
// one item at a time, gzipped when the request asks for it) two ways in the same run, one of each per
// iteration: from the peer directly, and through the filter behind an
// HTTP/2 TLS front. It reports, per path, the p50 time to the response
// headers and to the last byte, and the proxied/direct ratio of the
// latter: the filter's proxy hop on a large answer, without the rest of
// kube-apiserver (test/bench measures that on the real plane).
//
//	go test -run '^$' -bench LargeAnswer -benchtime 40x ./pkg/filter
func BenchmarkLargeAnswer(b *testing.B) {
	quietKlog()
	e := newEnv(b, frontHTTP2)
	piece := bytes.Repeat([]byte("x"), 1024)
	peer := e.newPeer(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// As kube-apiserver does for a large answer: gzip when asked.
		var out io.Writer = w
		if r.Header.Get("Accept-Encoding") == "gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		}
		for n := 0; n < largeAnswerBytes; n += len(piece) {
			if _, err := out.Write(piece); err != nil {
				return
			}
		}
	})
	e.setLocal()
	e.setRoutes(route(widgetsGVR, readyPeer("b", peer.endpoint())))
	pair, err := tls.LoadX509KeyPair(e.pki.clientCertFile, e.pki.clientKey)
	if err != nil {
		b.Fatal(err)
	}
	// Neither client asks for gzip (as a client with compression off).
	direct := &http.Client{Transport: &http.Transport{
		ForceAttemptHTTP2:  true,
		DisableCompression: true,
		TLSClientConfig:    &tls.Config{RootCAs: e.pki.peerCA.Pool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}}
	b.Cleanup(direct.CloseIdleConnections)
	ptr := e.client.Transport.(*http.Transport).Clone()
	ptr.DisableCompression = true
	proxied := &http.Client{Transport: ptr}
	b.Cleanup(proxied.CloseIdleConnections)
	paths := []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", direct, peer.URL + "/apis/example.com/v1/widgets"},
		{"proxied", proxied, e.front.URL + "/apis/example.com/v1/widgets"},
	}
	buf := make([]byte, 32<<10)
	read := func(client *http.Client, url string) (headers, total time.Duration) {
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		headers = time.Since(start)
		n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
		resp.Body.Close()
		total = time.Since(start)
		if err != nil || resp.StatusCode != http.StatusOK || n != largeAnswerBytes {
			b.Fatalf("GET %s: %d, %d bytes, %v", url, resp.StatusCode, n, err)
		}
		return headers, total
	}
	for _, p := range paths {
		read(p.client, p.url) // warm the connections
	}
	hdr := make([][]time.Duration, len(paths))
	tot := make([][]time.Duration, len(paths))
	b.SetBytes(largeAnswerBytes * int64(len(paths)))
	b.ResetTimer()
	for range b.N {
		for i, p := range paths {
			h, t := read(p.client, p.url)
			hdr[i], tot[i] = append(hdr[i], h), append(tot[i], t)
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	for i, p := range paths {
		b.ReportMetric(float64(p50(hdr[i]).Microseconds()), p.name+"-headers-µs")
		b.ReportMetric(float64(p50(tot[i]).Microseconds()), p.name+"-total-µs")
	}
	b.ReportMetric(float64(p50(tot[1]))/float64(p50(tot[0])), "proxied/direct")
}
