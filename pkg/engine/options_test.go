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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestOptionsDefaultsValid(t *testing.T) {
	if errs := NewOptions().Validate(); len(errs) != 0 {
		t.Fatalf("defaults invalid: %v", errs)
	}
}

func TestOptionsFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--refresh-interval=3s", "--scrape-timeout=2s", "--max-discovery-bytes=4096",
		"--scrape-concurrency=2", "--tombstone-period=1m", "--identity-lease-stale-after=20s", "--peer-server-name=peer.example"}); err != nil {
		t.Fatal(err)
	}
	if o.RefreshInterval != 3*time.Second || o.ScrapeTimeout != 2*time.Second || o.MaxDiscoveryBytes != 4096 || o.ScrapeConcurrency != 2 ||
		o.TombstonePeriod != time.Minute || o.IdentityLeaseStaleAfter != 20*time.Second || o.PeerServerName != "peer.example" {
		t.Errorf("flags not applied: %+v", o)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"refresh", func(o *Options) { o.RefreshInterval = 0 }, "--refresh-interval"},
		{"timeout", func(o *Options) { o.ScrapeTimeout = -time.Second }, "--scrape-timeout"},
		{"tombstone", func(o *Options) { o.TombstonePeriod = 0 }, "--tombstone-period"},
		{"stale after", func(o *Options) { o.IdentityLeaseStaleAfter = 0 }, "--identity-lease-stale-after"},
		{"max bytes", func(o *Options) { o.MaxDiscoveryBytes = 1023 }, "--max-discovery-bytes"},
		{"concurrency", func(o *Options) { o.ScrapeConcurrency = 0 }, "--scrape-concurrency"},
		{"server name", func(o *Options) { o.PeerServerName = "" }, "--peer-server-name"},
		{"ca file", func(o *Options) { o.PeerCAFile = filepath.Join(t.TempDir(), "missing.crt") }, "--peer-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			errs := o.Validate()
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Errorf("Validate = %v, want one error about %s", errs, tc.want)
			}
		})
	}
	o := NewOptions()
	o.RefreshInterval, o.ScrapeConcurrency = 0, 0
	if errs := o.Validate(); len(errs) != 2 {
		t.Errorf("every problem is reported: %v", errs)
	}
	o = NewOptions()
	o.PeerCAFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(o.PeerCAFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) != 0 {
		t.Errorf("an existing CA file: %v", errs)
	}
}
