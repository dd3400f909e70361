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

package engine

import (
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	"github.com/spf13/pflag"
)

// Options configure the peer engine.
type Options struct {
	PeerCAFile              string
	PeerServerName          string
	RefreshInterval         time.Duration
	ResyncInterval          time.Duration
	ScrapeTimeout           time.Duration
	MaxDiscoveryBytes       int64
	ScrapeConcurrency       int
	TombstonePeriod         time.Duration
	IdentityLeaseStaleAfter time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		PeerServerName:          nopeer.DefaultPeerServerName,
		RefreshInterval:         10 * time.Second,
		ResyncInterval:          10 * time.Minute,
		ScrapeTimeout:           5 * time.Second,
		MaxDiscoveryBytes:       8 << 20,
		ScrapeConcurrency:       8,
		TombstonePeriod:         10 * time.Minute,
		IdentityLeaseStaleAfter: 45 * time.Second,
	}
}

// durationFlag is one of the engine's duration flags; each must be positive.
type durationFlag struct {
	name  string
	value *time.Duration
	usage string
}

// durationFlags lists them once, for AddFlags and Validate.
func (o *Options) durationFlags() []durationFlag {
	return []durationFlag{
		{"refresh-interval", &o.RefreshInterval,
			"How often every peer is checked: its /version (the readiness heartbeat) when its registration Lease records what it serves, else its whole discovery (with If-None-Match, so unchanged documents cost a 304)."},
		{"resync-interval", &o.ResyncInterval,
			"How often a peer whose served record carries its discovery's ETags has its whole discovery read anyway (the safety poll; a record without ETags: at most every minute). A new record or ETags, a CRD or APIService change, a new version or a peer back from not ready reads it at once."},
		{"scrape-timeout", &o.ScrapeTimeout,
			"Deadline for reading one peer's /api, /apis and /version."},
		{"tombstone-period", &o.TombstonePeriod,
			"How long a peer that left keeps its APIs in the routing tables as unavailable (503, not 404)."},
		{"identity-lease-stale-after", &o.IdentityLeaseStaleAfter,
			"An upstream identity Lease not renewed for this long means its server is gone (upstream renews every 10s)."},
	}
}

// AddFlags adds the engine's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.PeerCAFile, "peer-ca-file", o.PeerCAFile,
		"CA bundle that signs the kube-apiservers' serving certificates (as kube-apiserver's --peer-ca-file). Empty: the CA of the kubeconfig or in-cluster config.")
	fs.StringVar(&o.PeerServerName, "peer-server-name", o.PeerServerName,
		"Server name verified in peers' serving certificates.")
	fs.Int64Var(&o.MaxDiscoveryBytes, "max-discovery-bytes", o.MaxDiscoveryBytes,
		"Largest discovery document accepted from a peer (a 5,000-GVR /apis is about 1.7 MB). Documents decode within 8 times this much memory in all.")
	fs.IntVar(&o.ScrapeConcurrency, "scrape-concurrency", o.ScrapeConcurrency,
		"Peers read at the same time.")
	for _, d := range o.durationFlags() {
		fs.DurationVar(d.value, d.name, *d.value, d.usage)
	}
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	var errs []error
	for _, d := range o.durationFlags() {
		if *d.value <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", d.name, *d.value))
		}
	}
	if o.MaxDiscoveryBytes < 1024 {
		errs = append(errs, fmt.Errorf("--max-discovery-bytes must be at least 1024, got %d", o.MaxDiscoveryBytes))
	}
	if o.ScrapeConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--scrape-concurrency must be at least 1, got %d", o.ScrapeConcurrency))
	}
	if o.PeerServerName == "" {
		errs = append(errs, fmt.Errorf("--peer-server-name must not be empty"))
	}
	if o.PeerCAFile != "" {
		if _, err := os.Stat(o.PeerCAFile); err != nil {
			errs = append(errs, fmt.Errorf("--peer-ca-file: %w", err))
		}
	}
	return errs
}
