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
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// RoutingsBoth as PEERDISCOVERY_ROUTING asks for this project's routing
// and upstream's built-in proxy side by side in one invocation.
const RoutingsBoth = "both"

// RoutingsFromEnv reads PEERDISCOVERY_ROUTING as a list of routings:
// "both" (RoutingsBoth), or one routing as localcluster.RoutingFromEnv
// reads it, or several separated by commas ("peerdiscovery" names this
// project's).
func RoutingsFromEnv() ([]localcluster.Routing, error) {
	v := os.Getenv("PEERDISCOVERY_ROUTING")
	if v == RoutingsBoth {
		return []localcluster.Routing{localcluster.RoutingPeerDiscovery, localcluster.RoutingUpstream}, nil
	}
	var out []localcluster.Routing
	for _, name := range strings.Split(v, ",") {
		r := localcluster.Routing(strings.TrimSpace(name))
		if r == "peerdiscovery" {
			r = localcluster.RoutingPeerDiscovery
		}
		switch r {
		case localcluster.RoutingPeerDiscovery, localcluster.RoutingUpstream, localcluster.RoutingNone:
		default:
			return nil, fmt.Errorf("PEERDISCOVERY_ROUTING=%q: want %q, a routing (peerdiscovery, %s, %s) or a comma-separated list", v, RoutingsBoth, localcluster.RoutingUpstream, localcluster.RoutingNone)
		}
		for _, seen := range out {
			if seen == r {
				return nil, fmt.Errorf("PEERDISCOVERY_ROUTING=%q names %s twice", v, r)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// MainRoutings is Main for a package that runs one scenario on several
// routings in the same invocation (RoutingsFromEnv): plane(r, i) is the
// configuration of the i-th routing's plane (each needs its own subnet
// octet). The planes start side by side; use gets them in routing order.
func MainRoutings(m *testing.M, mc MainConfig, plane func(r localcluster.Routing, i int) (localcluster.Config, error), use func([]localcluster.Routing, []*localcluster.Cluster)) {
	skipUnlessGated(m, mc)
	routings, err := RoutingsFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfgs := make([]localcluster.Config, len(routings))
	for i, r := range routings {
		if cfgs[i], err = plane(r, i); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if cfgs[i].Logf == nil {
			prefix := "localcluster " + r.String() + ": "
			cfgs[i].Logf = func(f string, a ...any) { fmt.Printf(prefix+f+"\n", a...) }
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), mc.StartTimeout)
	start := time.Now()
	clusters, errs := Parallel(len(cfgs), func(i int) (*localcluster.Cluster, error) { return localcluster.Start(ctx, cfgs[i]) })
	cancel()
	stopAll := func() {
		for _, c := range clusters {
			if c != nil {
				_ = c.Stop()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		stopAll()
		// In go test's form, as RunTests does.
		fmt.Printf("--- FAIL: TestMain (%.2fs)\n    starting the control planes: %v\n", time.Since(start).Seconds(), err)
		os.Exit(1)
	}
	use(routings, clusters)
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "component logs:")
		for i, c := range clusters {
			for name, path := range c.LogPaths() {
				fmt.Fprintf(os.Stderr, "  %s %s: %s\n", routings[i], name, path)
			}
		}
	}
	stopAll()
	os.Exit(code)
}

// Parallel runs f(0) … f(n-1) at once (one scenario on each plane) and
// returns their results and errors by index.
func Parallel[T any](n int, f func(i int) (T, error)) ([]T, []error) {
	out, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = f(i)
		}()
	}
	wg.Wait()
	return out, errs
}
