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

package upgradedrill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/workload"
)

// Namespace holds the drill's namespaced objects; its short-lived
// namespaces are named after it.
const Namespace = "upgrade-drill"

// userAgentPrefix + the index of the server a request was sent to is the
// workload's User-Agent.
const userAgentPrefix = "upgrade-drill/via-"

// ClusterConfig is the drill's control plane: three kube-apiservers of
// plan.From with the plan's shutdown delay, two peerdiscovery-apiserver
// replicas (none for upstream's routing), and a kube-controller-manager
// of plan.From on kube-apiserver-0 (its namespace controller deletes the
// workload's namespaces; its deployment controller writes the
// Deployments' status).
func ClusterConfig(plan Plan, routing localcluster.Routing, octet int) (localcluster.Config, error) {
	cfg := localcluster.Config{ExtensionReplicas: 2, SubnetOctet: octet}
	cfg.ControllerManager = localcluster.ControllerManagerSpec{Server: 0, Version: plan.From}
	for range 3 {
		cfg.Servers = append(cfg.Servers, serverSpec(plan, plan.From))
	}
	return cfg, routing.Apply(&cfg)
}

func serverSpec(plan Plan, version string) localcluster.ServerSpec {
	return localcluster.ServerSpec{Version: version, ExtraFlags: []string{
		fmt.Sprintf("--shutdown-delay-duration=%ds", int(plan.ShutdownDelay.Seconds())),
	}}
}

// Phase is a span of the drill: the warmup, each step (from its SIGTERM
// to the end of its settle time), the tail.
type Phase struct {
	Name  string        `json:"name"`
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
}

// StepResult is when a step's server stopped and was ready again.
type StepResult struct {
	Step    Step          `json:"step"`
	SIGTERM time.Duration `json:"sigterm"`
	Exited  time.Duration `json:"exited"`
	Ready   time.Duration `json:"ready"`
	// Convergence is measured from the audit logs after the drill.
	Convergence Convergence `json:"convergence"`
}

// Result is everything one drill saw.
type Result struct {
	Routing    string                    `json:"routing"`
	Plan       Plan                      `json:"plan"`
	Run        string                    `json:"run"`
	Started    time.Time                 `json:"started"`
	Phases     []Phase                   `json:"phases"`
	Steps      []StepResult              `json:"steps"`
	Samples    []workload.Sample         `json:"samples"`
	Attempts   []workload.Attempt        `json:"attempts"`
	Skipped    int                       `json:"skipped"`
	Writes     workload.WriteCheck       `json:"writes"`
	Informers  []workload.InformerCheck  `json:"informers"`
	Namespaces []workload.NamespaceCheck `json:"namespaces"`
	// ControllerManagerRestarts: how often the harness restarted the
	// kube-controller-manager (it exits when its server is gone longer
	// than its leader renew deadline).
	ControllerManagerRestarts int `json:"controllerManagerRestarts"`
}

// Kinds are the drill's: ConfigMaps, Deployments, a CRD's Widgets and,
// once a server of the newer release is ready, StorageVersionMigrations.
var Kinds = []workload.Kind{workload.ConfigMaps, workload.Deployments, workload.Widgets, workload.StorageVersionMigrations}

func newOnly(k workload.Kind) bool { return k.Name == workload.StorageVersionMigrations.Name }

// Run performs the drill on c, which ClusterConfig describes: each step
// stops the server with SIGTERM and starts the step's release (RunWith
// with ProcessRoll).
func Run(ctx context.Context, c *localcluster.Cluster, routing localcluster.Routing, plan Plan, logf func(string, ...any)) (*Result, error) {
	return RunWith(ctx, c, routing, plan, Options{Roll: ProcessRoll(c, routing, plan)}, logf)
}

// Options are what a drill leaves to its control plane.
type Options struct {
	// Roll replaces step.Server by step.Version and returns once the new
	// server is ready; it calls exited once the old one has stopped.
	Roll func(ctx context.Context, step Step, exited func()) error
	// Steps replaces plan.Steps().
	Steps []Step
	// AfterStep, if set, runs after step i's settle time, while the
	// workload goes on (e.g. a rollout restart of the extension).
	AfterStep func(ctx context.Context, i int) error
}

// ProcessRoll rolls a server of the process plane: SIGTERM, then the
// step's binary started with the same flags.
func ProcessRoll(c *localcluster.Cluster, routing localcluster.Routing, plan Plan) func(context.Context, Step, func()) error {
	return func(_ context.Context, step Step, exited func()) error {
		if err := c.StopAPIServer(step.Server, syscall.SIGTERM); err != nil {
			return err
		}
		exited()
		spec, err := routing.Server(c, serverSpec(plan, step.Version))
		if err != nil {
			return err
		}
		return c.UpgradeAPIServer(step.Server, spec)
	}
}

// RunWith runs the drill on c with opts: the workload, informers on every
// server, each step rolled by opts.Roll, then the checks.
func RunWith(ctx context.Context, c *localcluster.Cluster, routing localcluster.Routing, plan Plan, opts Options, logf func(string, ...any)) (*Result, error) {
	run := fmt.Sprintf("r%d", rand.IntN(1e6))
	res := &Result{Routing: routing.String(), Plan: plan, Run: run}
	logf = prefixed(routing.String(), logf)
	var configs []*rest.Config
	for i := range c.Servers() {
		configs = append(configs, c.AdminConfig(i))
	}
	if err := workload.SetUp(ctx, configs, Namespace); err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	var newServed atomic.Bool // read by the workload's goroutines
	newInformers := false
	start := time.Now()
	res.Started = start
	w, err := workload.New(workload.Config{
		Run: run, Namespace: Namespace, Kinds: Kinds,
		Rate: plan.Rate, Workers: plan.Workers, MaxDuration: plan.MaxDuration, Seed: plan.Seed,
		UserAgent: userAgentPrefix,
		// Sent only while a ready server serves them: so every 404 is false.
		Sendable:       func(k workload.Kind) bool { return !newOnly(k) || newServed.Load() },
		NamespaceEvery: plan.NamespaceEvery, NamespaceLife: plan.NamespaceLife,
	}, configs, start)
	if err != nil {
		return nil, err
	}
	inf, err := workload.NewInformers(configs, run)
	if err != nil {
		return nil, err
	}
	defer inf.Stop()
	if err := inf.Start(ctx, workload.Deployments, time.Minute); err != nil {
		return nil, err
	}

	wctx, stopWorkload := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	defer func() { stopWorkload(); <-done }()
	phase := func(name string) {
		if n := len(res.Phases); n > 0 {
			res.Phases[n-1].End = w.Since()
		}
		res.Phases = append(res.Phases, Phase{Name: name, Start: w.Since()})
		w.SetPhase(len(res.Phases) - 1)
		logf("upgrade drill: %s", name)
	}
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}

	phase(fmt.Sprintf("warmup: 3 × %s", plan.From))
	if err := sleep(plan.Warmup); err != nil {
		return nil, err
	}
	steps := opts.Steps
	if steps == nil {
		steps = plan.Steps()
	}
	for i, step := range steps {
		if step.Server == PickProxiedTo {
			// The server the others proxied most to in the last settle
			// time: its stop measures how fast they leave it.
			from := res.Steps[len(res.Steps)-1].Ready
			step.Server = mostProxiedTo(c, res.Started, from, w.Since())
		}
		phase("roll " + step.String())
		sr := StepResult{Step: step, SIGTERM: w.Since()}
		lag := time.AfterFunc(plan.HealthCheckLag, func() { w.SetInRotation(step.Server, false) })
		err := opts.Roll(ctx, step, func() {
			lag.Stop()
			w.SetInRotation(step.Server, false)
			sr.Exited = w.Since()
		})
		lag.Stop()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", step, err)
		}
		sr.Ready = w.Since()
		w.SetInRotation(step.Server, true)
		if step.Version == plan.To && !newInformers {
			// From now on a ready server serves the newer release's kinds.
			newServed.Store(true)
			newInformers = true
			if err := inf.Start(ctx, workload.StorageVersionMigrations, 0); err != nil {
				return nil, err
			}
		}
		logf("upgrade drill: %s: exited %.1fs after SIGTERM, ready %.1fs after that", step, (sr.Exited - sr.SIGTERM).Seconds(), (sr.Ready - sr.Exited).Seconds())
		res.Steps = append(res.Steps, sr)
		if err := sleep(plan.Settle); err != nil {
			return nil, err
		}
		if opts.AfterStep != nil {
			if err := opts.AfterStep(ctx, i); err != nil {
				return nil, fmt.Errorf("after %s: %w", step, err)
			}
		}
	}
	phase("tail")
	if err := sleep(plan.Tail); err != nil {
		return nil, err
	}
	stopWorkload()
	<-done
	res.Phases[len(res.Phases)-1].End = w.Since()
	rec := w.Records()
	res.Samples, res.Attempts, res.Skipped = rec.Samples, rec.Attempts, rec.Skipped

	// Quorum reads through a server of the newer release (it serves every kind).
	final, err := dynamic.NewForConfig(c.AdminConfig(1))
	if err != nil {
		return nil, err
	}
	clientFor := func(workload.Kind) dynamic.Interface { return final }
	quorum := func(ctx context.Context) (map[string][]unstructured.Unstructured, error) {
		return workload.QuorumLists(ctx, Kinds, clientFor, run)
	}
	lists, err := quorum(ctx)
	if err != nil {
		return nil, err
	}
	res.Writes = workload.CheckWrites(rec.Creates, lists)
	res.Informers = inf.Converge(ctx, nil, Kinds, quorum, time.Minute)
	nctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	res.Namespaces = workload.CheckNamespaces(nctx, rec.Namespaces, Kinds, clientFor, w.Since)
	cancel()
	res.ControllerManagerRestarts = len(c.ControllerManagerRestarts())
	for i := range res.Steps {
		end := res.Phases[len(res.Phases)-1].End
		if i+1 < len(res.Steps) {
			end = res.Steps[i+1].SIGTERM
		}
		conv, err := convergence(c.AuditLogPath(res.Steps[i].Step.Server), res.Started, res.Steps[i], end)
		if err != nil {
			return nil, err
		}
		res.Steps[i].Convergence = conv
	}
	return res, nil
}

// mostProxiedTo is the server whose audit log has the most requests that
// another server proxied to it between from and to (offsets from
// started); kube-apiserver-1 when none has any.
func mostProxiedTo(c *localcluster.Cluster, started time.Time, from, to time.Duration) int {
	best, most := 1, 0
	for i := range c.Servers() {
		n, err := proxiedTo(c.AuditLogPath(i), i, started, from, to)
		if err == nil && n > most {
			best, most = i, n
		}
	}
	return best
}

func prefixed(p string, logf func(string, ...any)) func(string, ...any) {
	return func(f string, a ...any) { logf(p+": "+f, a...) }
}
