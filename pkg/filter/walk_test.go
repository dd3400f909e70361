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
	"net/http"
	"os"
	"strconv"
	"testing"
)

// TestRequestWalk drives one request through the filter for
// hack/request-walk.sh, which traces it with dlv: the bench's setup (a
// server serving pods and apps, a TLS peer serving widgets), a warm-up
// request to the same path (so connections are pooled), then the traced
// request between two calls of requestWalkMark. It runs only when
// PEERDISCOVERY_REQUEST_WALK names the path; PEERDISCOVERY_REQUEST_WALK_CODE
// is the status the request must get (200 by default).
func TestRequestWalk(t *testing.T) {
	path := os.Getenv("PEERDISCOVERY_REQUEST_WALK")
	if path == "" {
		t.Skip("PEERDISCOVERY_REQUEST_WALK is not set: hack/request-walk.sh runs this")
	}
	want := http.StatusOK
	if c := os.Getenv("PEERDISCOVERY_REQUEST_WALK_CODE"); c != "" {
		var err error
		if want, err = strconv.Atoi(c); err != nil {
			t.Fatalf("PEERDISCOVERY_REQUEST_WALK_CODE=%q: %v", c, err)
		}
	}
	quietKlog()
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	s := newBenchSetup(t, next)
	for _, traced := range []bool{false, true} {
		w := &benchWriter{h: http.Header{}}
		req := benchRequest(t, path)
		if traced {
			requestWalkMark("begin")
		}
		s.ours.ServeHTTP(w, req)
		if traced {
			requestWalkMark("end")
		}
		if w.code != want {
			t.Fatalf("%s: status %d, want %d", path, w.code, want)
		}
	}
}

// requestWalkMark marks where the traced request starts and ends.
//
//go:noinline
func requestWalkMark(string) {}
