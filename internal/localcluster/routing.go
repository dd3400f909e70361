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

package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Routing is what routes requests between the kube-apiservers of a
// cluster; the suites that compare with upstream (test/controllers,
// test/conformance) read it from PEERDISCOVERY_ROUTING.
type Routing string

const (
	// RoutingPeerDiscovery is this project: the filter and
	// peerdiscovery-apiserver (what CI runs).
	RoutingPeerDiscovery Routing = ""
	// RoutingUpstream is plain upstream kube-apiservers with the built-in
	// UnknownVersionInteroperabilityProxy on
	// (hack/build-kube-apiserver-upstream.sh).
	RoutingUpstream Routing = "upstream"
	// RoutingNone is plain upstream kube-apiservers with no peer proxy.
	RoutingNone Routing = "none"
)

// RoutingFromEnv reads PEERDISCOVERY_ROUTING.
func RoutingFromEnv() (Routing, error) {
	r := Routing(os.Getenv("PEERDISCOVERY_ROUTING"))
	switch r {
	case RoutingPeerDiscovery, RoutingUpstream, RoutingNone:
		return r, nil
	}
	return r, fmt.Errorf("PEERDISCOVERY_ROUTING=%q: want \"\", %s or %s", string(r), RoutingUpstream, RoutingNone)
}

// String names the routing in reports.
func (r Routing) String() string {
	if r == RoutingPeerDiscovery {
		return "peerdiscovery"
	}
	return string(r)
}

// Apply makes cfg route with r: for upstream and none, the servers run
// the plain upstream binaries of their versions (which must be built) and
// no peerdiscovery-apiserver runs.
func (r Routing) Apply(cfg *Config) error {
	if r == RoutingPeerDiscovery {
		return nil
	}
	out, err := cfg.outputDir()
	if err != nil {
		return err
	}
	cfg.ExtensionReplicas = -1
	for i := range cfg.Servers {
		if cfg.Servers[i], err = r.server(out, cfg.Servers[i]); err != nil {
			return err
		}
	}
	return nil
}

// Server is spec as this routing runs it, for UpgradeAPIServer.
func (r Routing) Server(c *Cluster, spec ServerSpec) (ServerSpec, error) {
	if r == RoutingPeerDiscovery {
		return spec, nil
	}
	return r.server(c.cfg.OutputDir, spec)
}

func (r Routing) server(outputDir string, s ServerSpec) (ServerSpec, error) {
	s.Binary = filepath.Join(outputDir, "bin", "kube-apiserver-upstream-"+s.Version, "kube-apiserver")
	if _, err := os.Stat(s.Binary); err != nil {
		return s, fmt.Errorf("routing %s needs hack/build-kube-apiserver-upstream.sh %s: %w", r, s.Version, err)
	}
	s.ExtraFlags = append(slices.Clone(s.ExtraFlags), "--feature-gates=UnknownVersionInteroperabilityProxy="+strconv.FormatBool(r == RoutingUpstream))
	s.OmitPeerFlags = r == RoutingNone
	return s, nil
}
