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

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/pkg/merge"
	"sigs.k8s.io/peerdiscovery/test/workload"
)

// Namespace holds the soak's namespaced objects; its short-lived
// namespaces are named after it.
const Namespace = "chaos"

const userAgentPrefix = "chaos/via-"

// Versions of the plane: two servers of the older release (with
// policy/v1 off, so PodDisruptionBudgets, like StorageVersionMigrations,
// are served by the newer release only) and one of the newer.
var Versions = []string{"v1.36.3", "v1.36.3", "v1.37.2"}

// Kinds are the soak's: core, apps, a CRD, and two the newer server
// alone serves (one cluster-wide, one namespaced).
var Kinds = []workload.Kind{workload.ConfigMaps, workload.Deployments, workload.Widgets, workload.StorageVersionMigrations, workload.PodDisruptionBudgets}

// ClusterConfig is the soak's plane: Versions, two extension replicas
// (none upstream), the kube-controller-manager of the older release on
// kube-apiserver-0, a 5 s shutdown delay.
func ClusterConfig(routing localcluster.Routing, octet int) (localcluster.Config, error) {
	cfg := localcluster.Config{ExtensionReplicas: 2, SubnetOctet: octet}
	// The namespace controller's and the root CA publisher's decisions are
	// in its log, for the namespace invariant's incidents.
	cfg.ControllerManager = localcluster.ControllerManagerSpec{Server: 0, ExtraFlags: []string{
		"--vmodule=namespaced_resources_deleter=5,namespace_controller=4,publisher=4"}}
	for _, v := range Versions {
		flags := []string{"--shutdown-delay-duration=5s"}
		if v != Versions[len(Versions)-1] {
			flags = append(flags, "--runtime-config=policy/v1=false")
		}
		cfg.Servers = append(cfg.Servers, localcluster.ServerSpec{Version: v, ExtraFlags: flags})
	}
	return cfg, routing.Apply(&cfg)
}

// Config is one soak.
type Config struct {
	Seed uint64
	// Duration is the time the episodes may take (Episodes decides how
	// many from the schedule); warmup, tail and the final checks add to
	// it.
	Duration time.Duration
	// Rate and Workers as in workload.Config.
	Rate, Workers int
}

// Timing of a soak.
const (
	warmup = 10 * time.Second
	tail   = 10 * time.Second
	settle = 5 * time.Second
	// episodeOverhead estimates what an episode takes besides its faults:
	// restarts, settling, the informer check.
	episodeOverhead = 20 * time.Second
	// healthCheckLag: a stopped or frozen server leaves the client load
	// balancer's rotation this long after its fault.
	healthCheckLag = time.Second
	// InformerBound is how long informers get to equal a quorum list
	// after an episode, from the check's start or, for an informer whose
	// reflector was backing off then, from its first request after it
	// (workload.Informers.Converge): seed 913 measured 55 s on upstream,
	// 52 s here, from the check's start.
	InformerBound = 90 * time.Second
	// namespaceBound bounds the wait for deleted namespaces at the end.
	namespaceBound = 3 * time.Minute
)

// Checkpoint is the informer check after an episode.
type Checkpoint struct {
	Episode   int                      `json:"episode"`
	At        time.Duration            `json:"at"`
	Informers []workload.InformerCheck `json:"informers"`
}

// Result is everything one soak saw.
type Result struct {
	Routing         string                    `json:"routing"`
	Seed            uint64                    `json:"seed"`
	Duration        time.Duration             `json:"duration"`
	Started         time.Time                 `json:"started"`
	End             time.Duration             `json:"end"`
	TombstonePeriod time.Duration             `json:"tombstonePeriod"`
	Served          map[string][]int          `json:"served"`
	Episodes        []Episode                 `json:"episodes"`
	Events          []Event                   `json:"events"`
	Violations      []Violation               `json:"violations"`
	Checkpoints     []Checkpoint              `json:"checkpoints"`
	Writes          workload.WriteCheck       `json:"writes"`
	Namespaces      []workload.NamespaceCheck `json:"namespaces"`
	Samples         []workload.Sample         `json:"samples"`
	Attempts        []workload.Attempt        `json:"attempts"`
	Skipped         int                       `json:"skipped"`
	// ControllerManagerRestarts: how often the harness restarted it.
	ControllerManagerRestarts int `json:"controllerManagerRestarts"`
}

// ByInvariant counts the violations of each invariant.
func (r *Result) ByInvariant() map[string]int {
	out := map[string]int{}
	for _, v := range r.Violations {
		out[v.Invariant]++
	}
	return out
}

// soak is one running soak.
type soak struct {
	c        *localcluster.Cluster
	routing  localcluster.Routing
	cfg      Config
	w        *workload.Workload
	m        *Monitor
	episodes []Episode
	logf     func(string, ...any)
}

// Run soaks c (ClusterConfig) with the episodes; b is shared by the soaks
// of one invocation.
func Run(ctx context.Context, c *localcluster.Cluster, routing localcluster.Routing, cfg Config, episodes []Episode, b *Barrier, logf func(string, ...any)) (_ *Result, retErr error) {
	defer func() {
		if retErr != nil {
			b.Abort()
		}
	}()
	run := fmt.Sprintf("s%d", cfg.Seed)
	res := &Result{Routing: routing.String(), Seed: cfg.Seed, Duration: cfg.Duration, Episodes: episodes, TombstonePeriod: localcluster.DefaultTombstonePeriod}
	prefix := routing.String() + ": "
	s := &soak{c: c, routing: routing, cfg: cfg, episodes: episodes, logf: func(f string, a ...any) { logf(prefix+f, a...) }}
	var configs []*rest.Config
	for i := range c.Servers() {
		configs = append(configs, c.AdminConfig(i))
	}
	if err := workload.SetUp(ctx, configs, Namespace); err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	served, err := servedKinds(ctx, configs, Kinds)
	if err != nil {
		return nil, err
	}
	res.Served = served
	s.m = NewMonitor(len(configs), served, res.TombstonePeriod)
	s.m.notify = func(v Violation) {
		s.logf("VIOLATION (seed %d) at %.1fs: %s: %s (the timeline is printed at the end)", cfg.Seed, v.At.Seconds(), v.Invariant, v.Detail)
	}
	inf, err := workload.NewInformers(configs, run)
	if err != nil {
		return nil, err
	}
	defer inf.Stop()
	for _, k := range Kinds {
		if err := inf.Start(ctx, k, time.Minute); err != nil {
			return nil, err
		}
	}
	if err := b.Wait(ctx); err != nil {
		return nil, err
	}
	res.Started = time.Now()
	s.w, err = workload.New(workload.Config{
		Run: run, Namespace: Namespace, Kinds: Kinds,
		Rate: cfg.Rate, Workers: cfg.Workers, Seed: cfg.Seed, UserAgent: userAgentPrefix,
		// Hard bound: the episodes, their restarts and checks, twice over.
		MaxDuration:    2*cfg.Duration + 10*time.Minute,
		NamespaceEvery: 10 * time.Second, NamespaceLife: 10 * time.Second,
		OnSample: s.m.Sample, OnAttempt: s.m.Attempt,
	}, configs, res.Started)
	if err != nil {
		return nil, err
	}
	wctx, stopWorkload := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.w.Run(wctx) }()
	defer func() { stopWorkload(); <-done }()

	quorumClient, err := dynamic.NewForConfig(configs[len(configs)-1])
	if err != nil {
		return nil, err
	}
	// Through the newest server: it serves every kind itself.
	clientFor := func(workload.Kind) dynamic.Interface { return quorumClient }
	quorum := func(ctx context.Context) (map[string][]unstructured.Unstructured, error) {
		return workload.QuorumLists(ctx, Kinds, clientFor, run)
	}

	if err := sleep(ctx, warmup); err != nil {
		return nil, err
	}
	for n, ep := range episodes {
		if err := b.Wait(ctx); err != nil {
			return nil, err
		}
		s.w.SetPhase(n + 1)
		s.event(Event{Text: fmt.Sprintf("episode %d: %s", n+1, ep)})
		s.logf("chaos: episode %d/%d: %s", n+1, len(episodes), ep)
		if err := s.episode(ctx, ep); err != nil {
			return nil, fmt.Errorf("episode %d (%s): %w", n+1, ep, err)
		}
		if err := sleep(ctx, settle); err != nil {
			return nil, err
		}
		s.w.PauseWrites()
		cp := Checkpoint{Episode: n + 1, At: s.w.Since(), Informers: inf.Converge(ctx, nil, Kinds, quorum, InformerBound)}
		s.w.ResumeWrites()
		s.checkInformers(cp)
		res.Checkpoints = append(res.Checkpoints, cp)
	}
	s.w.SetPhase(len(episodes) + 1)
	if err := sleep(ctx, tail); err != nil {
		return nil, err
	}
	stopWorkload()
	<-done
	res.End = s.w.Since()
	rec := s.w.Records()
	res.Samples, res.Attempts, res.Skipped = rec.Samples, rec.Attempts, rec.Skipped

	lists, err := quorum(ctx)
	if err != nil {
		return nil, err
	}
	res.Writes = workload.CheckWrites(rec.Creates, lists)
	for _, l := range res.Writes.Lost {
		s.m.Violate(Violation{Invariant: InvWrites, At: res.End, Server: -1, Detail: "acknowledged create lost: " + l})
	}
	for _, d := range res.Writes.Duplicated {
		s.m.Violate(Violation{Invariant: InvWrites, At: res.End, Server: -1, Detail: "create applied more than once: " + d})
	}
	for _, p := range res.Writes.StillPresent {
		s.m.Violate(Violation{Invariant: InvWrites, At: res.End, Server: -1, Detail: "acknowledged delete undone: " + p})
	}
	final := Checkpoint{Episode: len(episodes) + 1, At: res.End, Informers: inf.Converge(ctx, nil, Kinds, quorum, InformerBound)}
	s.checkInformers(final)
	res.Checkpoints = append(res.Checkpoints, final)
	nctx, cancel := context.WithTimeout(ctx, namespaceBound)
	res.Namespaces = workload.CheckNamespaces(nctx, rec.Namespaces, Kinds, clientFor, s.w.Since)
	cancel()
	for _, n := range res.Namespaces {
		// A namespace that is not gone, or whose objects could not be
		// listed, was not shown to be clean: that is no pass.
		detail := ""
		switch {
		case !n.Gone:
			detail = fmt.Sprintf("namespace %s, deleted at %.1fs, still there (Terminating) when the check ended %s after the workload", n.Name, n.Deleted.Seconds(), namespaceBound)
		case n.Err != "":
			detail = fmt.Sprintf("namespace %s, deleted at %.1fs, gone %.1fs later, not checked: %s", n.Name, n.Deleted.Seconds(), n.GoneAfter.Seconds(), n.Err)
		case len(n.Left) > 0:
			detail = fmt.Sprintf("namespace %s, deleted at %.1fs, gone %.1fs later, left %d objects: %s", n.Name, n.Deleted.Seconds(), n.GoneAfter.Seconds(), len(n.Left), strings.Join(first(n.Left, 5), ", "))
		}
		if detail != "" {
			s.m.Violate(Violation{Invariant: InvNamespaces, At: n.Deleted, Server: -1, Detail: detail})
		}
	}
	res.ControllerManagerRestarts = len(c.ControllerManagerRestarts())
	res.Violations, res.Events = s.m.Violations(), s.m.Events()
	return res, nil
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

func (s *soak) event(e Event) {
	e.At = s.w.Since()
	s.m.Event(e)
}

func (s *soak) checkInformers(cp Checkpoint) {
	for _, ic := range cp.Informers {
		if !ic.Equal {
			s.m.Violate(Violation{Invariant: InvInformers, At: cp.At, Server: ic.Server, Kind: ic.Kind,
				Detail: fmt.Sprintf("%s informer of kube-apiserver-%d %s after its clock started (its reflector's backoff: %s): %d missing, %d extra, %d at another resourceVersion", ic.Kind, ic.Server, InformerBound, ic.Waited.Round(100*time.Millisecond), ic.Missing, ic.Extra, ic.Stale)})
		}
	}
	what := fmt.Sprintf("informer check after episode %d", cp.Episode)
	if cp.Episode > len(s.episodes) {
		what = "final informer check"
	}
	s.event(Event{Text: fmt.Sprintf("%s: %d of %d equal", what, equal(cp.Informers), len(cp.Informers))})
}

func equal(ics []workload.InformerCheck) int {
	n := 0
	for _, ic := range ics {
		if ic.Equal {
			n++
		}
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// servedKinds maps each kind (and namespaces) to the servers whose own
// discovery (profile=nopeer) lists it.
func servedKinds(ctx context.Context, configs []*rest.Config, kinds []workload.Kind) (map[string][]int, error) {
	out := map[string][]int{}
	for i, cfg := range configs {
		gvrs := map[string]bool{}
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		for _, path := range []string{"/api", "/apis"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer")
			resp, err := client.Do(req)
			if err != nil {
				return nil, err
			}
			var body []byte
			body, err = readAll(resp)
			if err != nil {
				return nil, err
			}
			var list apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(body, &list); err != nil {
				return nil, fmt.Errorf("discovery of kube-apiserver-%d: %w", i, err)
			}
			for gvr := range merge.Resources(list.Items) {
				gvrs[gvr.String()] = true
			}
		}
		for _, k := range append([]workload.Kind{{Name: "namespaces", GVR: workload.NamespacesGVR}}, kinds...) {
			if gvrs[k.GVR.String()] {
				out[k.Name] = append(out[k.Name], i)
			}
		}
	}
	for _, k := range kinds {
		if len(out[k.Name]) == 0 {
			return nil, fmt.Errorf("no kube-apiserver serves %s", k)
		}
	}
	return out, nil
}

func readAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Request.URL.Path, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
