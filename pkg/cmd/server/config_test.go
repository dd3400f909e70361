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
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	pdapiserver "sigs.k8s.io/peerdiscovery/pkg/apiserver"
)

func TestDefaults(t *testing.T) {
	o := NewOptions()
	ro := o.RecommendedOptions
	if ro.Etcd != nil || ro.Admission != nil || ro.Features.EnablePriorityAndFairness {
		t.Errorf("etcd %v, admission %v, APF %v: want none (nothing stored or written; the aggregator applied APF)", ro.Etcd, ro.Admission, ro.Features.EnablePriorityAndFairness)
	}
	if ro.SecureServing.BindPort != 6443 || ro.SecureServing.ServerCert.CertDirectory != "" {
		t.Errorf("serving: port %d, cert directory %q", ro.SecureServing.BindPort, ro.SecureServing.ServerCert.CertDirectory)
	}
	if o.StaleAfter != pdapiserver.DefaultStaleAfter || o.ShutdownDelay != 5*time.Second || o.Engine == nil {
		t.Errorf("stale after %s, shutdown delay %s, engine %v", o.StaleAfter, o.ShutdownDelay, o.Engine)
	}
	le := o.LeaderElection
	if !le.LeaderElect || le.ResourceLock != resourcelock.LeasesResourceLock || le.ResourceNamespace != "peerdiscovery" || le.ResourceName != "peerdiscovery-apiserver" {
		t.Errorf("leader election: %+v", le)
	}
	if le.LeaseDuration.Duration != 15*time.Second || le.RenewDeadline.Duration != 10*time.Second || le.RetryPeriod.Duration != 2*time.Second {
		t.Errorf("leader election durations: %+v", le)
	}
}

// setFlags parses args into o's flags as the command does.
func setFlags(t *testing.T, o *Options, args ...string) error {
	t.Helper()
	cmd := NewCommand(context.Background(), o, nil)
	return cmd.ParseFlags(args)
}

func TestValidationNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stale-after=0s"}, "--stale-after must be positive, got 0s"},
		{[]string{"--stale-after=-1m"}, "--stale-after must be positive, got -1m0s"},
		{[]string{"--shutdown-delay-duration=-1s"}, "--shutdown-delay-duration must not be negative, got -1s"},
		{[]string{"--secure-port=70000"}, "--secure-port 70000 must be between 1 and 65535"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o := NewOptions()
			if err := setFlags(t, o, tc.args...); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Values that are not durations never reach Validate.
	if err := setFlags(t, NewOptions(), "--stale-after=soon"); err == nil || !strings.Contains(err.Error(), `invalid argument "soon" for "--stale-after"`) {
		t.Fatalf("--stale-after=soon: %v", err)
	}
	// Neither do arguments.
	cmd := NewCommand(context.Background(), NewOptions(), nil)
	cmd.SetArgs([]string{"extra"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Fatalf("an argument: %v", err)
	}
}

// TestConfig: the options reach the server config.
func TestConfig(t *testing.T) {
	o := NewOptions()
	// No cluster to delegate to in a unit test.
	o.RecommendedOptions.Authentication = nil
	o.RecommendedOptions.Authorization = nil
	o.RecommendedOptions.CoreAPI = nil
	o.RecommendedOptions.SecureServing.BindPort = 0
	o.RecommendedOptions.SecureServing.ServerCert.CertDirectory = t.TempDir()
	if err := setFlags(t, o, "--stale-after=3m", "--shutdown-delay-duration=7s"); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ExtraConfig.StaleAfter != 3*time.Minute || cfg.GenericConfig.ShutdownDelayDuration != 7*time.Second || cfg.ExtraConfig.Engine != o.Engine {
		t.Fatalf("config: stale after %s, shutdown delay %s, engine %v", cfg.ExtraConfig.StaleAfter, cfg.GenericConfig.ShutdownDelayDuration, cfg.ExtraConfig.Engine)
	}
	host, _ := os.Hostname()
	ec := cfg.ExtraConfig.EventElection
	if ec == nil || ec.LeaderElection != o.LeaderElection || !strings.HasPrefix(ec.Identity, host+"_") {
		t.Fatalf("event election: %+v", ec)
	}
	if cfg.GenericConfig.OpenAPIV3Config == nil {
		t.Fatal("no OpenAPI v3 config")
	}
	// The types have no protobuf encoding: none is advertised.
	for _, info := range cfg.GenericConfig.Serializer.SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeProtobuf {
			t.Fatal("the serializer advertises protobuf")
		}
	}

	// Without leader election every replica emits Events.
	o.LeaderElection.LeaderElect = false
	if cfg, err = o.Config(); err != nil || cfg.ExtraConfig.EventElection != nil {
		t.Fatalf("--leader-elect=false: event election %+v, %v", cfg.ExtraConfig.EventElection, err)
	}
}
