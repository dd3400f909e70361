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

package hostileheaders

import (
	"net/http"
	"testing"

	"golang.org/x/net/http/httpguts"
)

func TestSets(t *testing.T) {
	sets := Sets("authentication.kubernetes.io/credential-id")
	if len(sets) < 50 {
		t.Fatalf("%d header sets, want at least 50", len(sets))
	}
	names := map[string]bool{}
	for _, s := range sets {
		if names[s.Name] {
			t.Errorf("duplicate name %q", s.Name)
		}
		names[s.Name] = true
		for k, vs := range s.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Errorf("%s: invalid header name %q", s.Name, k)
			}
			for _, v := range vs {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Errorf("%s: invalid value %q", s.Name, v)
				}
			}
		}
		_, hasConn := s.Header["Connection"]
		if hasConn != s.HTTP1Only {
			t.Errorf("%s: Connection header %v but HTTP1Only %v", s.Name, hasConn, s.HTTP1Only)
		}
	}
}

func TestExtraHeader(t *testing.T) {
	for key, want := range map[string]string{
		"scopes": "X-Remote-Extra-Scopes",
		"authentication.kubernetes.io/credential-id": "X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id",
	} {
		if got := http.CanonicalHeaderKey(ExtraHeader(key)); got != want {
			t.Errorf("ExtraHeader(%q) = %q, want %q", key, got, want)
		}
	}
}
