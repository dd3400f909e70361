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

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// Routings are the two planes of a run: this project's and upstream's.
var Routings = []localcluster.Routing{localcluster.RoutingPeerDiscovery, localcluster.RoutingUpstream}

// Subnet octets of the bench's planes (the other packages use 77-86).
const (
	octetPeerDiscovery = 91
	octetUpstream      = 92
)

// PlaneConfig is one plane of the bench: servers of the given releases
// with env added to their environment, routed by r; this project's plane
// has one peerdiscovery-apiserver replica refreshing at its default
// interval; no kube-controller-manager.
func PlaneConfig(r localcluster.Routing, versions, env []string) (localcluster.Config, error) {
	octet := octetPeerDiscovery
	if r != localcluster.RoutingPeerDiscovery {
		octet = octetUpstream
	}
	cfg := localcluster.Config{
		SubnetOctet:       octet,
		ExtensionReplicas: 1,
		// peerdiscovery-apiserver's own default, not the tests' 2 s: the
		// scrapes it makes of every kube-apiserver are part of the cost.
		RefreshInterval: 10 * time.Second,
		Verbosity:       1,
		KeepRuns:        10,
	}
	cfg.ControllerManager.Disabled = true
	for _, v := range versions {
		cfg.Servers = append(cfg.Servers, localcluster.ServerSpec{Version: v, Env: env})
	}
	return cfg, r.Apply(&cfg)
}

// Plane is a running plane.
type Plane struct {
	Routing localcluster.Routing
	C       *localcluster.Cluster
}

// StartPlanes starts one plane per routing at once, each with servers of
// versions (env added to their environment), and returns them in Routings
// order; on error it stops what started.
func StartPlanes(ctx context.Context, versions, env []string, logf func(string, ...any)) ([]*Plane, error) {
	planes := make([]*Plane, len(Routings))
	errs := make([]error, len(Routings))
	var wg sync.WaitGroup
	for i, r := range Routings {
		cfg, err := PlaneConfig(r, versions, env)
		if err != nil {
			return nil, err
		}
		cfg.Logf = func(f string, a ...any) { logf(r.String()+": "+f, a...) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := localcluster.Start(ctx, cfg)
			if err != nil {
				errs[i] = fmt.Errorf("starting the %s plane: %w", r, err)
				return
			}
			planes[i] = &Plane{Routing: r, C: c}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		StopPlanes(planes)
		return nil, err
	}
	return planes, nil
}

// StopPlanes stops every plane started.
func StopPlanes(planes []*Plane) {
	for _, p := range planes {
		if p != nil {
			_ = p.C.Stop()
		}
	}
}

// serverOf is the index of the first server of version on p.
func (p *Plane) serverOf(version string) int {
	for i, s := range p.C.Servers() {
		if s.Version == version {
			return i
		}
	}
	panic("no server of " + version)
}

// Path is one way to reach the v1.37-only resource: on a v1.37.2 server
// (direct) or through the v1.36.3 one (proxied), on one plane.
type Path struct {
	Routing string `json:"routing"` // peerdiscovery, upstream
	Mode    string `json:"mode"`    // direct, proxied
	plane   *Plane
	server  int
}

// Name is routing/mode.
func (p *Path) Name() string { return p.Routing + "/" + p.Mode }

// Config is a client config for the path's server as the admin.
func (p *Path) Config() *rest.Config { return p.plane.C.AdminConfig(p.server) }

// Paths are the four paths of planes: per plane, direct then proxied.
func Paths(planes []*Plane) []*Path {
	var out []*Path
	for _, pl := range planes {
		out = append(out,
			&Path{Routing: pl.Routing.String(), Mode: "direct", plane: pl, server: pl.serverOf(NewVersion)},
			&Path{Routing: pl.Routing.String(), Mode: "proxied", plane: pl, server: pl.serverOf(OldVersion)})
	}
	return out
}

// rotate returns paths starting at offset k, so that no path is always
// measured first (or right after the same other one).
func rotate[T any](s []T, k int) []T {
	if len(s) == 0 {
		return s
	}
	k %= len(s)
	return append(append([]T{}, s[k:]...), s[:k]...)
}

// httpClient is a client of its own (not client-go's shared transport
// cache, so each has its own connections) for cfg's server and
// credentials, over HTTP/2, that leaves compression to the caller: it
// sends no Accept-Encoding of its own and never decompresses.
func httpClient(cfg *rest.Config) (*http.Client, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	t := &http.Transport{
		TLSClientConfig:     tlsCfg,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	if _, err := http2.ConfigureTransports(t); err != nil {
		return nil, err
	}
	return &http.Client{Transport: t}, nil
}

// url is the server's address plus path.
func url(cfg *rest.Config, path string) string { return strings.TrimSuffix(cfg.Host, "/") + path }
