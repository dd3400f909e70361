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

package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A trace as dlv writes it, of functions declared in this repository: the
// compiler's wrappers, test code and calls outside the marks are left out,
// value and pointer receivers, closures and build-constrained files are
// found.
const trace = `> goroutine(1): sigs.k8s.io/peerdiscovery/pkg/filter.New(...)
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter.requestWalkMark("begin")
>> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter.requestWalkMark => ()
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter.(*handler).ServeHTTP(("*sigs.k8s.io/peerdiscovery/pkg/filter.handler")(0xbec6aaa3ec0), net/http.ResponseWriter(*sigs.k8s.io/peerdiscovery/pkg/filter.benchWriter) 0xbeef)
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/routing.Decide(("*sigs.k8s.io/peerdiscovery/pkg/routing.Snapshot")(0xbec6ac84960))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*Proxier).Serve(("*sigs.k8s.io/peerdiscovery/pkg/filter/proxy.Proxier")(0xbec6a952140))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter.(*benchWriter).Header(("*sigs.k8s.io/peerdiscovery/pkg/filter.benchWriter")(0xbec6b358e40))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*inflight).bind(("*sigs.k8s.io/peerdiscovery/pkg/filter/proxy.inflight")(0xbec6a9521e0))
> goroutine(46): type:.eq.sigs.k8s.io/peerdiscovery/pkg/filter/proxy.proxyKey(("*sigs.k8s.io/peerdiscovery/pkg/filter/proxy.proxyKey")(0xbec6b2f2030))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*Proxier).newReverseProxy.func1(("*net/http/httputil.ProxyRequest")(0xbec6b377780))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.setPeerHeaders(("*net/http.Request")(0xbec6accb540))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*currentTransport).RoundTrip(("*sigs.k8s.io/peerdiscovery/pkg/filter/proxy.currentTransport")(0xbec6b376dd0))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.currentTransport.RoundTrip(sigs.k8s.io/peerdiscovery/pkg/filter/proxy.currentTransport {})
> goroutine(156): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*attempt).wroteRequest-fm()
> goroutine(156): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*attempt).wroteRequest(("*sigs.k8s.io/peerdiscovery/pkg/filter/proxy.attempt")(0xbec6b336080))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*trackingWriter).Header(("*sigs.k8s.io/peerdiscovery/pkg/filter/proxy.trackingWriter")(0xbec6ad36480))
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.(*inflight).bind.func2()
> goroutine(47): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.endCleanly.gowrap1()
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/proxy.annotateFailedOver(context.Context(*context.valueCtx) 0xbeef)
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/metrics.Proxied(context.Context(*context.valueCtx) 0xbeef)
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter/metrics.incRerouted(context.Context(*context.valueCtx) 0xbeef)
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter.requestWalkMark("end")
> goroutine(46): sigs.k8s.io/peerdiscovery/pkg/filter.(*handler).ServeHTTP(...)
`

func TestWalk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	if err := os.WriteFile(path, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	steps, err := walk(path, "../..")
	if err != nil {
		t.Fatal(err)
	}
	want := []step{
		{"filter.(*handler).ServeHTTP", "pkg/filter/filter.go"},
		{"routing.Decide", "pkg/routing/decide.go"},
		{"proxy.(*Proxier).Serve", "pkg/filter/proxy/proxy.go"},
		{"proxy.(*inflight).bind", "pkg/filter/proxy/inflight.go"},
		{"proxy.(*Proxier).newReverseProxy.func1", "pkg/filter/proxy/proxy.go"},
		{"proxy.setPeerHeaders", "pkg/filter/proxy/proxy.go"},
		{"proxy.currentTransport.RoundTrip", "pkg/filter/proxy/transport.go"},
		{"proxy.(*attempt).wroteRequest", "pkg/filter/proxy/transport.go"},
		{"proxy.(*inflight).bind.func2", "pkg/filter/proxy/inflight.go"},
		{"proxy.endCleanly.gowrap1", "pkg/filter/proxy/response.go"},
		{"proxy.annotateFailedOver", "pkg/filter/proxy/proxy.go"},
		{"metrics.Proxied", "pkg/filter/metrics/metrics.go"},
		// upstream.go, not the v1.35 build's upstream_k8s135.go.
		{"metrics.incRerouted", "pkg/filter/metrics/upstream.go"},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("steps:\n%v\nwant:\n%v", steps, want)
	}
	order, entries := fileEntries(steps)
	if want := []string{"pkg/filter/filter.go", "pkg/routing/decide.go", "pkg/filter/proxy/proxy.go", "pkg/filter/proxy/inflight.go",
		"pkg/filter/proxy/transport.go", "pkg/filter/proxy/response.go", "pkg/filter/metrics/metrics.go", "pkg/filter/metrics/upstream.go"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if entries["pkg/filter/proxy/proxy.go"] != 3 || entries["pkg/filter/proxy/inflight.go"] != 2 || entries["pkg/filter/proxy/transport.go"] != 1 {
		t.Errorf("entries %v, want proxy.go 3, inflight.go 2, transport.go 1", entries)
	}
}

func TestWalkWithoutMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	if err := os.WriteFile(path, []byte("> goroutine(1): sigs.k8s.io/peerdiscovery/pkg/filter.New(...)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := walk(path, "../.."); err == nil {
		t.Fatal("a trace without the marks gave a walk, want an error")
	}
}
