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
	"math/rand"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
)

// ClusterConfig is the drill's control plane: three kube-apiservers of
// plan.From with the plan's shutdown delay, two peerdiscovery-apiserver
// replicas (none for upstream's routing), no kube-controller-manager.
func ClusterConfig(plan Plan, routing localcluster.Routing, octet int) (localcluster.Config, error) {
	cfg := localcluster.Config{ExtensionReplicas: 2, SubnetOctet: octet}
	cfg.ControllerManager.Disabled = true
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
	Routing   string          `json:"routing"`
	Plan      Plan            `json:"plan"`
	Run       string          `json:"run"`
	Started   time.Time       `json:"started"`
	Phases    []Phase         `json:"phases"`
	Steps     []StepResult    `json:"steps"`
	Samples   []Sample        `json:"samples"`
	Attempts  []Attempt       `json:"attempts"`
	Skipped   int             `json:"skipped"`
	Writes    WriteCheck      `json:"writes"`
	Informers []InformerCheck `json:"informers"`
}

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
	run := fmt.Sprintf("r%d", rand.New(rand.NewSource(time.Now().UnixNano())).Intn(1e6))
	res := &Result{Routing: routing.String(), Plan: plan, Run: run}
	admin, err := dynamic.NewForConfig(c.AdminConfig(0))
	if err != nil {
		return nil, err
	}
	if err := setUp(ctx, c, admin); err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	var configs []*rest.Config
	for i := range c.Servers() {
		configs = append(configs, c.AdminConfig(i))
	}
	w, err := newWorkload(plan, run, configs)
	if err != nil {
		return nil, err
	}
	inf, err := startInformers(ctx, configs, run)
	if err != nil {
		return nil, err
	}
	defer inf.stop()

	w.start = time.Now()
	res.Started = w.start
	wctx, stopWorkload := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	defer func() { stopWorkload(); <-done }()
	since := func() time.Duration { return time.Since(w.start) }
	phase := func(name string) {
		if n := len(res.Phases); n > 0 {
			res.Phases[n-1].End = since()
		}
		res.Phases = append(res.Phases, Phase{Name: name, Start: since()})
		w.phase.Store(int32(len(res.Phases) - 1))
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
		phase("roll " + step.String())
		sr := StepResult{Step: step, SIGTERM: since()}
		lag := time.AfterFunc(plan.HealthCheckLag, func() { w.inRotation[step.Server].Store(false) })
		err := opts.Roll(ctx, step, func() {
			lag.Stop()
			w.inRotation[step.Server].Store(false)
			sr.Exited = since()
		})
		lag.Stop()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", step, err)
		}
		sr.Ready = since()
		w.inRotation[step.Server].Store(true)
		if step.Version == plan.To && !w.newServed.Load() {
			// From now on a ready server serves the newer release's kinds.
			w.newServed.Store(true)
			inf.startNewOnly()
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
	res.Phases[len(res.Phases)-1].End = since()

	w.mu.Lock()
	res.Samples, res.Attempts, res.Skipped = w.samples, w.attempts, w.skipped
	creates := w.creates
	w.mu.Unlock()

	// Quorum reads through a server of the newer release (it serves every kind).
	final, err := dynamic.NewForConfig(c.AdminConfig(1))
	if err != nil {
		return nil, err
	}
	lists, err := quorumLists(ctx, final, run)
	if err != nil {
		return nil, err
	}
	res.Writes = checkWrites(creates, lists)
	res.Informers = inf.compare(ctx, lists)
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

// setUp creates the namespace and the CRD, and waits until every server
// serves the CRD.
func setUp(ctx context.Context, c *localcluster.Cluster, admin dynamic.Interface) error {
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": Namespace}}}
	if _, err := admin.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := admin.Resource(crds).Create(ctx, widgetsCRD(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i := range c.Servers() {
		client, err := dynamic.NewForConfig(c.AdminConfig(i))
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := client.Resource(widgetsGVR).Namespace(Namespace).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("kube-apiserver %d does not serve %s: %w", i, widgetsGVR, err)
		}
	}
	return nil
}

// quorumLists reads every kind's objects of the run, by kind.
func quorumLists(ctx context.Context, client dynamic.Interface, run string) (map[string][]unstructured.Unstructured, error) {
	out := map[string][]unstructured.Unstructured{}
	for _, k := range kinds {
		r := dynamic.ResourceInterface(client.Resource(k.gvr))
		if k.namespaced {
			r = client.Resource(k.gvr).Namespace(Namespace)
		}
		var list *unstructured.UnstructuredList
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			list, err = r.List(ctx, metav1.ListOptions{LabelSelector: runLabel + "=" + run})
			return err == nil, nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", k, err)
		}
		out[k.name] = list.Items
	}
	return out, nil
}

// WriteCheck compares what the clients were told with what is stored.
type WriteCheck struct {
	Creates int `json:"creates"`
	Acked   int `json:"acked"`
	// FoundOnce: acked, not deleted since, stored exactly once.
	FoundOnce int `json:"foundOnce"`
	// Lost: acked, not deleted since, not stored.
	Lost []string `json:"lost"`
	// Duplicated: one create stored more than once.
	Duplicated []string `json:"duplicated"`
	// Unacked creates that may have happened: stored 0 or 1 times is right.
	UnackedStored    int `json:"unackedStored"`
	UnackedAbsent    int `json:"unackedAbsent"`
	DeletesAcked     int `json:"deletesAcked"`
	DeletesUncertain int `json:"deletesUncertain"`
	// StillPresent: an acked delete's object is stored.
	StillPresent []string `json:"stillPresent"`
}

func checkWrites(creates []*createRecord, lists map[string][]unstructured.Unstructured) WriteCheck {
	stored := map[string]int{}
	for kind, items := range lists {
		for _, it := range items {
			stored[kind+"/"+it.GetLabels()[opLabel]]++
		}
	}
	wc := WriteCheck{Creates: len(creates), Lost: []string{}, Duplicated: []string{}, StillPresent: []string{}}
	for _, r := range creates {
		key := fmt.Sprintf("%s/%d", r.Kind, r.Op)
		n := stored[key]
		if n > 1 {
			wc.Duplicated = append(wc.Duplicated, fmt.Sprintf("%s ×%d", key, n))
		}
		switch {
		case !r.Acked && n > 0:
			wc.UnackedStored++
		case !r.Acked:
			wc.UnackedAbsent++
		case r.DeleteAcked:
			wc.Acked++
			wc.DeletesAcked++
			if n > 0 {
				wc.StillPresent = append(wc.StillPresent, key+" "+r.Name)
			}
		case r.DeleteUncertain:
			wc.Acked++
			wc.DeletesUncertain++
		default:
			wc.Acked++
			if n == 0 {
				wc.Lost = append(wc.Lost, key+" "+r.Name)
			} else if n == 1 {
				wc.FoundOnce++
			}
		}
	}
	return wc
}

// OK says whether the writes held: nothing lost, nothing twice, every
// acked delete gone.
func (wc WriteCheck) OK() bool {
	return len(wc.Lost) == 0 && len(wc.Duplicated) == 0 && len(wc.StillPresent) == 0
}

func (wc WriteCheck) String() string {
	return fmt.Sprintf("%d creates (%d acked: %d stored once, %d lost, %d deleted with an ack, %d deleted uncertainly; %d not acked: %d stored, %d not), %d duplicated, %d still present after an acked delete%s",
		wc.Creates, wc.Acked, wc.FoundOnce, len(wc.Lost), wc.DeletesAcked, wc.DeletesUncertain, wc.UnackedStored+wc.UnackedAbsent, wc.UnackedStored, wc.UnackedAbsent,
		len(wc.Duplicated), len(wc.StillPresent), listed(wc.Lost, wc.Duplicated, wc.StillPresent))
}

func listed(lists ...[]string) string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return ""
	}
	if len(all) > 10 {
		all = append(all[:10], "…")
	}
	return ": " + strings.Join(all, ", ")
}
