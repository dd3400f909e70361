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
	"net"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/replication"
)

func TestLeaderElectionFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"off", []string{"--leader-elect=false", "--advertise-address=127.0.0.1"}, ""},
		{"configmap lock", []string{"--leader-elect-resource-lock=configmapsleases"}, "--leader-elect-resource-lock"},
		{"renew not below lease", []string{"--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"}, "lease-duration > --leader-elect-renew-deadline"},
		{"no namespace", []string{"--leader-elect-resource-namespace="}, "--leader-elect-resource-namespace must be set"},
		{"loopback advertise", []string{"--advertise-address=127.0.0.1"}, "cannot reach a loopback"},
		{"no apiservice", []string{"--apiservice="}, "--apiservice must be set"},
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

func TestAdvertiseAddressDefaultsToASpecificBindAddress(t *testing.T) {
	o := NewOptions()
	o.RecommendedOptions.SecureServing.BindAddress = net.ParseIP("10.1.2.3")
	ip, err := o.advertiseAddress()
	if err != nil || !ip.Equal(net.ParseIP("10.1.2.3")) {
		t.Fatalf("advertise address %v, %v; want the bind address", ip, err)
	}
	o.AdvertiseAddress = net.ParseIP("10.9.9.9")
	if ip, _ := o.advertiseAddress(); !ip.Equal(o.AdvertiseAddress) {
		t.Fatalf("--advertise-address ignored: %v", ip)
	}
	if o.LeaderElection.LeaseDuration.Duration != 15*time.Second || o.LeaderElection.ResourceName != "peerdiscovery-apiserver" {
		t.Fatalf("defaults: %+v", o.LeaderElection)
	}
	addr, ok := replication.AddressOf(replication.NewIdentity("10.9.9.9:6443"))
	if !ok || addr != "10.9.9.9:6443" {
		t.Fatalf("identity address %q %v", addr, ok)
	}
}
