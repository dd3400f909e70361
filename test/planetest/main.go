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

package planetest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// MainConfig says when and how Main starts a package's control plane.
type MainConfig struct {
	// Gate is the environment variable that must be "1" for the control
	// plane to start (PEERDISCOVERY_E2E when empty).
	Gate string
	// Skipped is printed when it is not: what the tests need and how to
	// run them.
	Skipped string
	// StartTimeout bounds the start of the control plane.
	StartTimeout time.Duration
	// Plane is the control plane's configuration, given the routing
	// PEERDISCOVERY_ROUTING asks for (localcluster.RoutingFromEnv); a
	// package that measures only this project's routing ignores it.
	Plane func(localcluster.Routing) (localcluster.Config, error)
}

// Main is the TestMain of a package whose tests run on a real local
// control plane. Without the gate it runs the tests, which skip; else it
// starts the plane (RunTests), hands it to use, runs the tests
// and exits. A bad routing or configuration exits with code 2.
func Main(m *testing.M, mc MainConfig, use func(*localcluster.Cluster)) {
	skipUnlessGated(m, mc)
	routing, err := localcluster.RoutingFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg, err := mc.Plane(routing)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	RunTests(m, mc.StartTimeout, cfg, use)
}

// skipUnlessGated runs the tests (which skip) and exits unless mc's gate
// is "1".
func skipUnlessGated(m *testing.M, mc MainConfig) {
	gate := mc.Gate
	if gate == "" {
		gate = "PEERDISCOVERY_E2E"
	}
	if os.Getenv(gate) != "1" {
		fmt.Println(mc.Skipped)
		os.Exit(m.Run())
	}
}

// RunTests is the body of a test package's TestMain: it starts a cluster
// from cfg (the start bounded by startTimeout), hands it to use, runs the
// tests, names the component logs if they failed, stops the cluster and
// exits with the tests' code.
func RunTests(m *testing.M, startTimeout time.Duration, cfg localcluster.Config, use func(*localcluster.Cluster)) {
	if cfg.Logf == nil {
		cfg.Logf = func(f string, a ...any) { fmt.Printf("localcluster: "+f+"\n", a...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	start := time.Now()
	c, err := localcluster.Start(ctx, cfg)
	cancel()
	if err != nil {
		// In go test's own form, so that a summary of failed tests (CI's
		// among them) names the plane's start and its error, not only the
		// package.
		fmt.Printf("--- FAIL: TestMain (%.2fs)\n    starting the control plane: %v\n", time.Since(start).Seconds(), err)
		os.Exit(1)
	}
	use(c)
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "component logs:")
		for name, path := range c.LogPaths() {
			fmt.Fprintf(os.Stderr, "  %s: %s\n", name, path)
		}
	}
	_ = c.Stop()
	os.Exit(code)
}
