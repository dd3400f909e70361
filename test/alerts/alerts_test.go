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

package alerts

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The alerts of alerts.yaml.
const (
	peerNotReady          = "PeerdiscoveryPeerNotReady"
	routesUnavailable     = "PeerdiscoveryRoutesUnavailable"
	proxyErrors           = "PeerdiscoveryProxyErrors"
	filterCachesUnsynced  = "PeerdiscoveryFilterCachesUnsynced"
	discoveryStale        = "PeerdiscoveryDiscoveryStale"
	apiServiceUnavailable = "PeerdiscoveryAPIServiceUnavailable"
	burnFast              = "PeerdiscoveryProxiedErrorBudgetBurnFast"
	burnSlow              = "PeerdiscoveryProxiedErrorBudgetBurnSlow"
	targetDown            = "PeerdiscoveryTargetDown"
)

// The proxied requests' 5xx ratio over the burn alerts' windows here (the
// shipped 5m and 1h divided by forDivisor), for the log.
const (
	ratioShort = `sum(rate(peerdiscovery_filter_peer_routed_requests_total{code=~"5.."}[30s])) / sum(rate(peerdiscovery_filter_peer_routed_requests_total[30s]))`
	ratioLong  = `sum(rate(peerdiscovery_filter_peer_routed_requests_total{code=~"5.."}[360s])) / sum(rate(peerdiscovery_filter_peer_routed_requests_total[360s]))`
)

// svmPath is a collection only v1.37.2 serves: through v1.36.3 it is
// proxied.
const svmPath = "/apis/storagemigration.k8s.io/v1/storageversionmigrations"

// row is one line of the report: an alert, the fault that made it fire
// and the repair that resolved it; or, with quiet set, a fault it had to
// stay quiet through (ep is then nil).
type row struct {
	quiet             string
	alert, fault, fix string
	faultAt, fixAt    time.Time
	ep                *episode
}

// TestAlertsFireAndResolve brings about each alert with a fault on the
// real control plane, undoes the fault, and reads from Prometheus when the
// alert went pending, fired and resolved.
func TestAlertsFireAndResolve(t *testing.T) {
	if cluster == nil {
		t.Skip("set PEERDISCOVERY_ALERTS_E2E=1 (hack/test-alerts.sh)")
	}
	binary := os.Getenv("PEERDISCOVERY_PROMETHEUS")
	if binary == "" {
		t.Fatal("PEERDISCOVERY_PROMETHEUS must name a prometheus binary (hack/build-prometheus.sh prometheus; hack/test-alerts.sh sets it)")
	}
	planetest.ReadyPlane(t, cluster, old)
	shipped := shippedRules(t)
	rules := e2eRules(t, shipped)
	shippedFor, e2eFor := map[string]time.Duration{}, map[string]time.Duration{}
	for gi, g := range shipped.Groups {
		for ri, r := range g.Rules {
			shippedFor[r.Alert], _ = time.ParseDuration(r.For)
			e2eFor[r.Alert], _ = time.ParseDuration(rules.Groups[gi].Rules[ri].For)
			if rules.Groups[gi].Rules[ri].Expr != e2eExpr(t, r) {
				t.Fatalf("%s: the expression run here differs from the shipped one (windows aside)", r.Alert)
			}
		}
	}

	// A discovery request the filter answers, so that its counter exists
	// (the dashboard reads it).
	if code, _, body := planetest.Get(t, cluster.AdminConfig(old), "/apis"); code != http.StatusOK {
		t.Fatalf("GET /apis through v1.36.3: %d %s", code, body)
	}
	p := startPrometheus(t, cluster, binary, rules)
	checkPrometheusRBAC(t)
	waitTargets(t, p)
	waitRulesHealthy(t, p, shippedFor)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	w := newWatcher(p)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.run(ctx)
	}()
	defer func() {
		cancel()
		<-watched
	}()

	// A healthy plane fires nothing.
	w.waitQuiet(t, 2*time.Minute)
	time.Sleep(30 * time.Second)
	if names := w.activeNames(); names != "" {
		t.Fatalf("alerts active on the healthy control plane: %s", names)
	}

	var rows []row
	defer func() { report(t, rows, w.all(), shippedFor, e2eFor) }()
	add := func(alert, fault, fix string, faultAt, fixAt time.Time, ep *episode) {
		rows = append(rows, row{alert: alert, fault: fault, fix: fix, faultAt: faultAt, fixAt: fixAt, ep: ep})
	}

	// 0. On the fresh Prometheus, whose long windows hold nothing else
	// yet: 5 LISTs/s of storageversionmigrations through v1.36.3, each
	// proxied to v1.37.2, run through 0a and 0b: the burn alerts' healthy
	// baseline.
	sloLoad := startTraffic(t, cluster.AdminConfig(old), svmPath, 200*time.Millisecond, 20*time.Minute)
	sloStart := time.Now()
	waitQuery(t, p, `sum(rate(peerdiscovery_filter_peer_routed_requests_total{code="200"}[1m])) > 0`, 2*time.Minute)

	// 0a. A replica stopped (SIGTERM): its endpoint stays in the
	// EndpointSlice, not ready, as a terminating or crash-looping Pod's
	// does, so it stays a target that does not answer (TargetDown).
	// Undone by starting it.
	planetest.KeepExtensionsRunning(t, cluster)
	down := len(cluster.Extensions()) - 1
	fault0 := time.Now()
	if err := cluster.StopExtension(down); err != nil {
		t.Fatal(err)
	}
	td := w.waitFiring(t, targetDown, fault0, 3*time.Minute)
	fix0 := time.Now()
	if err := cluster.StartExtension(down); err != nil {
		t.Fatal(err)
	}
	td = w.waitResolved(t, targetDown, td.firing, 2*time.Minute)
	add(targetDown, fmt.Sprintf("peerdiscovery-apiserver replica %s stopped (SIGTERM; its endpoint stays in the EndpointSlice, not ready)", cluster.Extensions()[down].Name), "started again", fault0, fix0, td)

	// 0b. A fault the SLO allows: v1.37.2, the only server of the listed
	// resource, hung for 15 s (SIGSTOP, SIGCONT) after at least 4.5
	// minutes of healthy load. Its requests wait, then get 503 once its
	// Lease lapses, until it renews it again: the short windows' ratio
	// passes both thresholds, the long ones' stays far below, and neither
	// burn alert may fire (watched until the slow one's short window, 3
	// minutes here, has forgotten the fault).
	w.waitQuiet(t, 2*time.Minute)
	if d := 270*time.Second - time.Since(sloStart); d > 0 {
		time.Sleep(d)
	}
	codesBefore := sloLoad.snapshot()
	faultA := time.Now()
	if err := cluster.FreezeAPIServer(upgraded); err != nil {
		t.Fatal(err)
	}
	time.Sleep(15 * time.Second)
	if err := cluster.ThawAPIServer(upgraded); err != nil {
		_ = cluster.ThawAPIServer(upgraded)
		t.Fatal(err)
	}
	fixA := time.Now()
	peakShort := w.peak(t, ratioShort, fixA.Add(20*time.Second))
	time.Sleep(200 * time.Second)
	peakLong := w.peak(t, ratioLong, time.Now())
	codesAfter := sloLoad.snapshot()
	answered := map[int]int{}
	for code, n := range codesAfter {
		answered[code] = n - codesBefore[code]
	}
	quiet := fmt.Sprintf("%v (the load's answers from the fault to %s after the repair); the 5xx ratio peaked at %s over 30 s and %s over 6 min", answered, 200*time.Second, peakShort, peakLong)
	for _, name := range []string{burnFast, burnSlow} {
		for _, ep := range w.all()[name] {
			if !ep.firing.IsZero() && ep.firing.After(faultA) {
				t.Errorf("%s fired at %s through a fault the SLO allows: %s", name, clock(ep.firing), quiet)
			}
		}
		rows = append(rows, row{alert: name, quiet: quiet, fault: "kube-apiserver v1.37.2, the only server of 4 GVRs, hung (SIGSTOP) for 15 s under 5 LISTs/s of `storageversionmigrations` through v1.36.3, after 4.5 minutes of them", fix: "resumed (SIGCONT)", faultAt: faultA, fixAt: fixA})
	}
	t.Logf("a fault the SLO allows: %s", quiet)
	t.Logf("the SLO load: %v", sloLoad.stop())
	w.waitQuiet(t, 6*time.Minute)

	// 1. v1.37.2, the only server of four GVRs, hangs while clients list
	// one of them through v1.36.3: the GVRs lose their last ready server
	// (RoutesUnavailable) and the proxied requests get 503 (ProxyErrors,
	// and the fast burn: the load has just started, so 503s soon make
	// most of the windows' proxied requests). Undone by resuming it, once
	// both fired: before the server's tombstone (60 s here) expires and
	// its GVRs would answer 404 instead.
	load := startTraffic(t, cluster.AdminConfig(old), svmPath, 200*time.Millisecond, 20*time.Minute)
	waitQuery(t, p, `sum(rate(apiserver_rerouted_request_total{resource="storageversionmigrations"}[1m])) > 0`, 2*time.Minute)
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = cluster.ThawAPIServer(upgraded)
		}
	})
	fault1 := time.Now()
	if err := cluster.FreezeAPIServer(upgraded); err != nil {
		t.Fatal(err)
	}
	ru := w.waitFiring(t, routesUnavailable, fault1, 3*time.Minute)
	bf := w.waitFiring(t, burnFast, fault1, 3*time.Minute)
	fix1 := time.Now()
	if err := cluster.ThawAPIServer(upgraded); err != nil {
		t.Fatal(err)
	}
	thawed = true
	ru = w.waitResolved(t, routesUnavailable, ru.firing, 3*time.Minute)
	hang := "kube-apiserver v1.37.2 hung (SIGSTOP), the only server of 4 GVRs"
	add(routesUnavailable, hang, "resumed (SIGCONT)", fault1, fix1, ru)
	bf = w.waitResolved(t, burnFast, bf.firing, 3*time.Minute)
	add(burnFast, hang+", under 5 LISTs/s of `storageversionmigrations` through v1.36.3 started just before (503s)", "resumed (SIGCONT)", fault1, fix1, bf)
	pe := w.waitFiring(t, proxyErrors, fault1, 5*time.Minute)

	// 2. A replica that cannot read what its view is computed from: the
	// rule letting the replicas list and watch CRDs removed from their
	// ClusterRole (an edited or outdated RBAC manifest applied), then one
	// replica restarted, as a rollout or a rescheduled Pod would. Each
	// replica computes its own view, and this one's informers never sync:
	// it publishes no view, its /readyz fails (it stays out of the
	// EndpointSlice), its view timestamp stays 0 (DiscoveryStale). The
	// running replica keeps its established CRD watch and serves. Undone
	// by restoring the rule: client-go's reflector lists again after its
	// backoff, the replica publishes and gets ready. Runs while
	// ProxyErrors' 5-minute window drains.
	stale := len(cluster.Extensions()) - 1
	fault3 := time.Now()
	restoreRBAC := revokeRule(t, "apiextensions.k8s.io", "customresourcedefinitions")
	if err := cluster.StopExtension(stale); err != nil {
		t.Fatal(err)
	}
	restarted := make(chan error, 1)
	go func() { restarted <- cluster.RestartExtensions(ctx, stale) }()
	ds := w.waitFiring(t, discoveryStale, fault3, 4*time.Minute)
	fix3 := time.Now()
	restoreRBAC()
	if err := <-restarted; err != nil {
		t.Fatalf("replica %d after the rule was restored: %v", stale, err)
	}
	ds = w.waitResolved(t, discoveryStale, ds.firing, 3*time.Minute)
	add(discoveryStale, fmt.Sprintf("replica %s restarted without the RBAC rule to list and watch CRDs (removed from the ClusterRole): its informers never sync, it computes no view", cluster.Extensions()[stale].Name), "RBAC rule restored", fault3, fix3, ds)
	pe = w.waitResolved(t, proxyErrors, pe.firing, 10*time.Minute)
	add(proxyErrors, hang+", under 5 LISTs/s of storageversionmigrations through v1.36.3", "resumed (SIGCONT)", fault1, fix1, pe)
	codes := load.stop()
	t.Logf("the load through v1.36.3: %v", codes)

	// 3. v1.37.2 restarted advertising a peer port nothing listens on (as
	// a firewall closing the peer port would): its Lease is renewed, its
	// discovery cannot be read (PeerNotReady). Undone by restarting it
	// with the right port.
	// Meanwhile the same 5 LISTs/s of storageversionmigrations through
	// v1.36.3: they get 503 while v1.37.2 restarts and while it is not
	// ready, a fault that lasts long enough for the slow burn (its
	// `for` 90 s here).
	w.waitQuiet(t, 5*time.Minute)
	load = startTraffic(t, cluster.AdminConfig(old), svmPath, 200*time.Millisecond, 20*time.Minute)
	waitQuery(t, p, `sum(rate(peerdiscovery_filter_peer_routed_requests_total{code="200"}[1m])) > 0`, 2*time.Minute)
	if err := cluster.StopAPIServer(upgraded, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	fault2 := time.Now()
	spec := localcluster.ServerSpec{Version: cluster.Servers()[upgraded].Version}
	bad := spec
	bad.ExtraFlags = []string{"--peer-advertise-port=6444"}
	if err := cluster.UpgradeAPIServer(upgraded, bad); err != nil {
		t.Fatal(err)
	}
	pn := w.waitFiring(t, peerNotReady, fault2, 5*time.Minute)
	bs := w.waitFiring(t, burnSlow, fault2, 5*time.Minute)
	fix2 := time.Now()
	if err := cluster.StopAPIServer(upgraded, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.UpgradeAPIServer(upgraded, spec); err != nil {
		t.Fatal(err)
	}
	pn = w.waitResolved(t, peerNotReady, pn.firing, 3*time.Minute)
	add(peerNotReady, "kube-apiserver v1.37.2 advertises peer port 6444, where nothing listens", "restarted with the right port", fault2, fix2, pn)
	bs = w.waitResolved(t, burnSlow, bs.firing, 6*time.Minute)
	add(burnSlow, "the same (v1.37.2 stopped, restarted advertising port 6444), under 5 LISTs/s of `storageversionmigrations` through v1.36.3 (503s)", "restarted with the right port", fault2, fix2, bs)
	t.Logf("the load through v1.36.3: %v", load.stop())

	// 4. Both peerdiscovery-apiserver replicas down (APIServiceUnavailable),
	// and meanwhile v1.36.3 restarted: its filter cannot sync
	// (FilterCachesUnsynced). Undone by starting the replicas.
	w.waitQuiet(t, 5*time.Minute)
	fault4 := time.Now()
	planetest.KeepExtensionsRunning(t, cluster)
	for i := range cluster.Extensions() {
		if err := cluster.StopExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	fault5 := time.Now()
	if err := cluster.StopAPIServer(old, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cluster.StartAPIServer(old); err != nil {
		t.Fatal(err)
	}
	as := w.waitFiring(t, apiServiceUnavailable, fault4, 4*time.Minute)
	fc := w.waitFiring(t, filterCachesUnsynced, fault5, 4*time.Minute)
	fix4 := time.Now()
	for i := range cluster.Extensions() {
		if err := cluster.StartExtension(i); err != nil {
			t.Fatal(err)
		}
	}
	as = w.waitResolved(t, apiServiceUnavailable, as.firing, 3*time.Minute)
	fc = w.waitResolved(t, filterCachesUnsynced, fc.firing, 3*time.Minute)
	add(apiServiceUnavailable, "both peerdiscovery-apiserver replicas stopped", "replicas started", fault4, fix4, as)
	add(filterCachesUnsynced, "kube-apiserver v1.36.3 restarted while no peerdiscovery-apiserver runs", "replicas started", fault5, fix4, fc)

	planetest.ReadyPlane(t, cluster, old)
	w.waitQuiet(t, 3*time.Minute)

	// Every alert fired and resolved.
	for name := range shippedFor {
		found := false
		for _, r := range rows {
			found = found || (r.alert == name && r.ep != nil && !r.ep.resolved.IsZero())
		}
		if !found {
			t.Errorf("%s did not fire and resolve", name)
		}
	}
	checkMetricNames(t, p)
	checkDashboardQueries(t, p)
	logInputAge(t, p)
}

// revokeRule removes the rule granting group/resource from the replicas'
// ClusterRole and returns what puts it back (also run at cleanup).
func revokeRule(t *testing.T, group, resource string) func() {
	t.Helper()
	ctx := context.Background()
	roles := planetest.Kube(t, cluster.AdminConfig(old)).RbacV1().ClusterRoles()
	cr, err := roles.Get(ctx, "peerdiscovery-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := slices.Clone(cr.Rules)
	var kept []rbacv1.PolicyRule
	for _, r := range cr.Rules {
		if !slices.Contains(r.APIGroups, group) || !slices.Contains(r.Resources, resource) {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(orig) {
		t.Fatalf("ClusterRole peerdiscovery-apiserver has no rule for %s.%s", resource, group)
	}
	cr.Rules = kept
	if _, err := roles.Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	restore := func() {
		once.Do(func() {
			planetest.WaitFor(t, time.Minute, "the ClusterRole restored", func() error {
				cr, err := roles.Get(ctx, "peerdiscovery-apiserver", metav1.GetOptions{})
				if err != nil {
					return err
				}
				cr.Rules = orig
				_, err = roles.Update(ctx, cr, metav1.UpdateOptions{})
				return err
			})
		})
	}
	t.Cleanup(restore)
	return restore
}
