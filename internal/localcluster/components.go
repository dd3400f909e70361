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

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// stopOnPurpose marks a component down (the load balancer, the
// EndpointSlice and Health then leave it alone), runs before (if not nil),
// and stops p with sig (SIGKILL after grace). p is stopped even if before
// fails; the error joins both.
func (c *Cluster) stopOnPurpose(down *atomic.Bool, p *process, what string, sig syscall.Signal, grace time.Duration, before func() error) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	down.Store(true)
	var errs []error
	if before != nil {
		errs = append(errs, before())
	}
	c.cfg.Logf("stopping %s", what)
	errs = append(errs, p.stop(sig, grace))
	return errors.Join(errs...)
}

// startAgain starts p again, unless the cluster is stopped, and waits with
// ready (bounded by Config.StartTimeout); opMu serializes it with Stop.
func (c *Cluster) startAgain(p *process, what string, ready func(context.Context) error) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.stopped.Load() {
		return errors.New("the cluster is stopped")
	}
	c.cfg.Logf("starting %s again", what)
	if err := p.start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StartTimeout)
	defer cancel()
	return ready(ctx)
}

// StopAPIServer stops kube-apiserver i with sig: SIGTERM for a graceful
// shutdown (SIGKILL after 60s), SIGKILL for a crash. The load balancer in
// front of the servers skips it until StartAPIServer.
func (c *Cluster) StopAPIServer(i int, sig syscall.Signal) error {
	s, err := c.processServer(i)
	if err != nil {
		return err
	}
	return c.stopOnPurpose(&s.down, s.proc, fmt.Sprintf("%s (%s) with %v", s.name, s.spec.Version, sig), sig, 60*time.Second, nil)
}

// FreezeAPIServer stops kube-apiserver i with SIGSTOP: its connections stay
// open and its kernel still accepts new ones, but it answers nothing, as a
// hung or partitioned server would. ThawAPIServer resumes it.
func (c *Cluster) FreezeAPIServer(i int) error { return c.signalAPIServer(i, syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen kube-apiserver i with SIGCONT.
func (c *Cluster) ThawAPIServer(i int) error { return c.signalAPIServer(i, syscall.SIGCONT) }

func (c *Cluster) signalAPIServer(i int, sig syscall.Signal) error {
	s, err := c.processServer(i)
	if err != nil {
		return err
	}
	c.cfg.Logf("sending %v to %s (%s)", sig, s.name, s.spec.Version)
	return s.proc.signal(sig)
}

// StartAPIServer starts kube-apiserver i again with the same hostname
// (identity), address, certificates and flags, and waits for its /readyz.
func (c *Cluster) StartAPIServer(i int) error {
	s, err := c.processServer(i)
	if err != nil {
		return err
	}
	return c.startAgain(s.proc, fmt.Sprintf("%s (%s)", s.name, s.spec.Version), func(ctx context.Context) error {
		if err := c.waitKubeAPIServerReady(ctx, s); err != nil {
			return err
		}
		s.down.Store(false)
		return nil
	})
}

// StartAPIServerAs starts kube-apiserver i again under another hostname,
// so under another identity, at the same address with the same flags (a
// control-plane machine replaced, or a static Pod that came back renamed).
// Later StartAPIServer calls keep that hostname.
func (c *Cluster) StartAPIServerAs(i int, hostname string) error {
	s, err := c.processServer(i)
	if err != nil {
		return err
	}
	c.opMu.Lock()
	s.proc.argv = c.nsArgv(hostname, append([]string{s.binary}, c.kubeAPIServerArgs(s)...)...)
	c.opMu.Unlock()
	return c.StartAPIServer(i)
}

// UpgradeAPIServer starts the stopped kube-apiserver i as spec (another
// release, binary or flags), with the same hostname (identity), address
// and certificates, as a node's static Pod does after kubeadm upgrade, and
// waits for its /readyz. The binary of spec.Version must be built; a
// routing other than this project's gives spec.Binary.
func (c *Cluster) UpgradeAPIServer(i int, spec ServerSpec) error {
	s, err := c.processServer(i)
	if err != nil {
		return err
	}
	binary := spec.Binary
	if binary == "" {
		binary = filepath.Join(c.cfg.binDir(), "kube-apiserver-"+spec.Version, "kube-apiserver")
	}
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("kube-apiserver %s: %w (hack/build-kube-apiserver.sh %s)", spec.Version, err, spec.Version)
	}
	c.opMu.Lock()
	if !s.down.Load() || s.proc.exitErr() == nil {
		c.opMu.Unlock()
		return fmt.Errorf("%s must be stopped before it is upgraded", s.name)
	}
	hostname := argvHostname(s.proc.argv) // StartAPIServerAs may have changed it
	s.spec, s.binary = spec, binary
	s.proc.argv = c.nsArgv(hostname, append([]string{s.binary}, c.kubeAPIServerArgs(s)...)...)
	s.proc.env = spec.Env
	c.opMu.Unlock()
	return c.StartAPIServer(i)
}

func (c *Cluster) ext(i int) (*extReplica, error) {
	if i < 0 || i >= len(c.exts) {
		return nil, fmt.Errorf("no peerdiscovery-apiserver replica %d (the cluster has %d)", i, len(c.exts))
	}
	return c.exts[i], nil
}

// anyServer is the first kube-apiserver not stopped on purpose.
func (c *Cluster) anyServer() (int, error) {
	for i, s := range c.servers {
		if !s.down.Load() {
			return i, nil
		}
	}
	return 0, errors.New("every kube-apiserver is stopped")
}

func (c *Cluster) adminClientset() (kubernetes.Interface, error) {
	i, err := c.anyServer()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(c.AdminConfig(i))
}

// StopExtension takes replica i out of the EndpointSlice (as the
// endpointslice controller would for a terminating Pod), then stops it
// (SIGTERM, SIGKILL after 15s).
func (c *Cluster) StopExtension(i int) error {
	e, err := c.ext(i)
	if err != nil {
		return err
	}
	return c.stopOnPurpose(&e.down, e.proc, e.name, syscall.SIGTERM, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := c.adminClientset()
		if err != nil {
			return err
		}
		return c.applyEndpointSlice(ctx, cs)
	})
}

// StartExtension starts replica i again, waits for its /readyz and puts it
// back into the EndpointSlice.
func (c *Cluster) StartExtension(i int) error {
	e, err := c.ext(i)
	if err != nil {
		return err
	}
	return c.startAgain(e.proc, e.name, func(ctx context.Context) error {
		if err := c.waitExtensionReady(ctx, e); err != nil {
			return err
		}
		e.down.Store(false)
		cs, err := c.adminClientset()
		if err != nil {
			return err
		}
		return c.applyEndpointSlice(ctx, cs)
	})
}
