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
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"sigs.k8s.io/peerdiscovery/test/bench"
)

// proxyPrefix names the proxy's own functions on each plane: the filter's,
// and upstream's built-in peer proxy.
var proxyPrefix = map[string]string{
	"peerdiscovery": ownPrefix,
	"upstream":      "k8s.io/apiserver/pkg/util/peerproxy.",
}

// areas classify a sample by its innermost frame, first match wins.
var areas = []struct{ name, prefix string }{
	{"TLS and crypto", "crypto/"},
	{"TLS and crypto", "vendor/golang.org/x/crypto/"},
	{"TLS and crypto", "golang.org/x/crypto/"},
	{"HTTP/2", "golang.org/x/net/http2."},
	{"HTTP/2", "net/http.http2"},
	{"HTTP/2", "net/http.(*http2"},
	{"net/http", "net/http"},
	{"syscalls", "syscall."},
	{"syscalls", "internal/poll."},
	{"syscalls", "internal/runtime/syscall"},
	{"memmove", "runtime.memmove"},
	{"encoding", "encoding/"},
	{"encoding", "sigs.k8s.io/json"},
	{"encoding", "google.golang.org/protobuf"},
	{"encoding", "github.com/gogo/protobuf"},
	{"encoding", "k8s.io/apimachinery/pkg/runtime/serializer"},
	{"encoding", "compress/"},
	{"this filter", ownPrefix},
	{"upstream's proxy", "k8s.io/apiserver/pkg/util/peerproxy."},
}

// runtimeArea splits the Go runtime into the garbage collector and
// allocator, and the rest (scheduling, timers, goroutine hand-offs).
func runtimeArea(fn string) string {
	for _, w := range []string{"gc", "GC", "mark", "scan", "sweep", "malloc", "heap", "Span", "span", "mcache", "mcentral", "wbBuf", "bulkBarrier", "memclr", "newobject", "makeslice", "growslice", "greyobject", "findObject"} {
		if strings.Contains(fn, w) {
			return "Go GC and allocation"
		}
	}
	return "Go scheduler and runtime"
}

func area(fn string) string {
	for _, a := range areas {
		if strings.HasPrefix(fn, a.prefix) {
			return a.name
		}
	}
	if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/runtime") {
		return runtimeArea(fn)
	}
	return "kube-apiserver, other"
}

// cpuFigures reads a CPU profile: the time by area of the innermost frame,
// the time with the plane's proxy on the stack (everything the proxy hop
// does, its TLS and HTTP/2 included, apart from the local chain it passes
// requests on to), and the largest functions by flat time.
func cpuFigures(path, routing string) (bench.CPUFigures, error) {
	out := bench.CPUFigures{Areas: map[string]time.Duration{}}
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return out, fmt.Errorf("%s: %w", path, err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return out, fmt.Errorf("%s: no cpu samples", path)
	}
	prefix := proxyPrefix[routing]
	flat := map[string]float64{}
	for _, s := range p.Sample {
		d := time.Duration(s.Value[idx])
		out.Total += d
		var names []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil {
					names = append(names, l.Function.Name)
				}
			}
		}
		if len(names) == 0 {
			continue
		}
		out.Areas[area(names[0])] += d
		flat[names[0]] += d.Seconds()
		for i, n := range names {
			if strings.HasPrefix(n, prefix) {
				if i == 0 || !passedOn(names[i-1]) {
					out.Filter += d
				}
				break
			}
		}
	}
	out.Top = top(flat, 10)
	return out, nil
}
