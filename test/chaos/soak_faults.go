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
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// episode injects each fault at its time and heals it after its hold,
// then waits until every one healed.
func (s *soak) episode(ctx context.Context, ep Episode) error {
	errs := make([]error, len(ep.Faults))
	var wg sync.WaitGroup
	for i, f := range ep.Faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sleep(ctx, f.At); err != nil {
				errs[i] = err
				return
			}
			errs[i] = s.fault(ctx, f)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fault injects f, holds it, heals it.
func (s *soak) fault(ctx context.Context, f Fault) error {
	c, w, m := s.c, s.w, s.m
	injected := w.Since()
	hold := func() error { return sleep(ctx, f.Hold-(w.Since()-injected)) }
	switch f.Kind {
	case KillServer, TermServer:
		i := f.Servers[0]
		sig, name := syscall.SIGKILL, "SIGKILL"
		if f.Kind == TermServer {
			sig, name = syscall.SIGTERM, "SIGTERM"
		}
		s.event(Event{Text: fmt.Sprintf("%s kube-apiserver-%d", name, i), Fault: f.Kind})
		m.Stopping(i, w.Since())
		lag := time.AfterFunc(healthCheckLag, func() { w.SetInRotation(i, false) })
		err := c.KillAPIServer(i, sig)
		m.Exited(i, w.Since())
		s.event(Event{Text: fmt.Sprintf("kube-apiserver-%d exited", i)})
		if err != nil {
			lag.Stop()
			return err
		}
		if err := hold(); err != nil {
			return err
		}
		lag.Stop()
		w.SetInRotation(i, false)
		s.event(Event{Text: fmt.Sprintf("kube-apiserver-%d starting", i)})
		if err := c.RestartAPIServer(ctx, i); err != nil {
			return err
		}
		m.Ready(i, w.Since())
		w.SetInRotation(i, true)
		s.event(Event{Text: fmt.Sprintf("kube-apiserver-%d ready", i), Fault: f.Kind, Heal: true})
	case FreezeServer:
		i := f.Servers[0]
		m.Unresponsive(i, w.Since())
		s.event(Event{Text: fmt.Sprintf("SIGSTOP kube-apiserver-%d", i), Fault: f.Kind})
		if err := c.FreezeAPIServer(i); err != nil {
			return err
		}
		// The load balancers' health checks notice it a moment later.
		lag := time.AfterFunc(healthCheckLag, func() { w.SetInRotation(i, false); _ = c.SetAPIServerHealthy(i, false) })
		if err := hold(); err != nil {
			return err
		}
		lag.Stop()
		if err := c.ThawAPIServer(i); err != nil {
			return err
		}
		_ = c.SetAPIServerHealthy(i, true)
		m.Responsive(i, w.Since())
		w.SetInRotation(i, true)
		s.event(Event{Text: fmt.Sprintf("SIGCONT kube-apiserver-%d", i), Fault: f.Kind, Heal: true})
	case Partition:
		i, j := f.Servers[0], f.Servers[1]
		s.event(Event{Text: fmt.Sprintf("partition kube-apiserver-%d | kube-apiserver-%d", i, j), Fault: f.Kind})
		// From before the rules are in: they cut connections at once.
		m.Partitioned(i, j, w.Since())
		if err := c.PartitionAPIServers(i, j); err != nil {
			return err
		}
		if err := hold(); err != nil {
			return err
		}
		if err := c.HealPartition(i, j); err != nil {
			return err
		}
		m.Healed(i, j, w.Since())
		s.event(Event{Text: fmt.Sprintf("partition kube-apiserver-%d | kube-apiserver-%d healed", i, j), Fault: f.Kind, Heal: true})
	case SlowServer:
		i := f.Servers[0]
		m.Unresponsive(i, w.Since())
		s.event(Event{Text: fmt.Sprintf("kube-apiserver-%d capped at %d%% CPU", i, f.CPUPercent), Fault: f.Kind})
		if err := c.SlowAPIServer(i, f.CPUPercent); err != nil {
			return err
		}
		if err := hold(); err != nil {
			return err
		}
		if err := c.UnslowAPIServer(i); err != nil {
			return err
		}
		m.Responsive(i, w.Since())
		s.event(Event{Text: fmt.Sprintf("kube-apiserver-%d CPU cap lifted", i), Fault: f.Kind, Heal: true})
	case KillReplica, KillAllReplicas:
		if len(c.Extensions()) == 0 {
			s.event(Event{Text: fmt.Sprintf("(%s: no peerdiscovery-apiserver on this routing)", f)})
			return hold()
		}
		sig := syscall.SIGKILL
		if f.Signal == "SIGTERM" {
			sig = syscall.SIGTERM
		}
		s.event(Event{Text: fmt.Sprintf("%s peerdiscovery-apiserver %v", f.Signal, f.Replicas), Fault: f.Kind})
		errs := make([]error, len(f.Replicas))
		var wg sync.WaitGroup
		for j, r := range f.Replicas {
			wg.Add(1)
			go func() { defer wg.Done(); errs[j] = c.KillExtension(r, sig) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := hold(); err != nil {
			return err
		}
		s.event(Event{Text: fmt.Sprintf("peerdiscovery-apiserver %v starting", f.Replicas)})
		if err := c.RestartExtensions(ctx, f.Replicas...); err != nil {
			return err
		}
		s.event(Event{Text: fmt.Sprintf("peerdiscovery-apiserver %v ready", f.Replicas), Fault: f.Kind, Heal: true})
	default:
		return fmt.Errorf("unknown fault %q", f.Kind)
	}
	return nil
}
