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

package server

import (
	"strings"
	"testing"
)

func TestLeaderElectionFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"off", []string{"--leader-elect=false"}, ""},
		{"configmap lock", []string{"--leader-elect-resource-lock=configmapsleases"}, "--leader-elect-resource-lock"},
		{"renew not below lease", []string{"--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"}, "lease-duration > --leader-elect-renew-deadline"},
		{"no namespace", []string{"--leader-elect-resource-namespace="}, "--leader-elect-resource-namespace must be set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := NewOptions()
			fs := o.Flags()
			for _, a := range c.args {
				name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				found := false
				for _, f := range fs.FlagSets {
					if f.Lookup(name) != nil {
						if err := f.Set(name, value); err != nil {
							t.Fatalf("%s: %v", a, err)
						}
						found = true
					}
				}
				if !found {
					t.Fatalf("no flag %s", name)
				}
			}
			err := o.Validate()
			if c.wantErr == "" {
				// Only the leader-election part is under test here.
				if err != nil && strings.Contains(err.Error(), "leader") {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}
