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

package replication

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// NewIdentity is a replica's election identity: its address (host:port,
// where the others reach its replication stream) and a per-process UUID,
// so a restarted replica is a new holder and starts a new epoch.
func NewIdentity(address string) string { return address + "_" + uuid.NewString() }

// AddressOf returns the address in an identity made by NewIdentity.
func AddressOf(identity string) (string, bool) {
	i := strings.LastIndex(identity, "_")
	if i <= 0 {
		return "", false
	}
	return identity[:i], true
}

// Roles is what the election switches (the ViewStore).
type Roles interface {
	Lead() error
	Demote()
	// HasState reports whether the replica holds a published state (its
	// own, or a copy of its leader's).
	HasState() bool
}

// ElectionConfig configures Run.
type ElectionConfig struct {
	// Lock is the Lease lock; its identity comes from NewIdentity.
	Lock          resourcelock.Interface
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Run elects the publisher among the replicas until ctx is done: the leader
// publishes (Roles.Lead), the others follow it. Losing the lease demotes
// this replica, which then follows whoever holds it. The lease is released
// on ctx's end, so another replica takes over within RetryPeriod.
func Run(ctx context.Context, cfg ElectionConfig, roles Roles, follower *Follower) {
	logger := klog.FromContext(ctx).WithName("replication")
	self := cfg.Lock.Identity()
	leaders := make(chan string, 1)
	setLeader := func(id string) {
		for {
			select {
			case leaders <- id:
				return
			default:
				select { // replace a leader nobody has acted on yet
				case <-leaders:
				default:
				}
			}
		}
	}
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		followLeaders(ctx, self, leaders, follower)
	}()
	defer func() { <-followDone }()

	awaitTurn(ctx, cfg, roles, setLeader)
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            cfg.Lock,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            "peerdiscovery-apiserver",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					setLeader(self)
					logger.Info("Leading: this replica computes and publishes", "identity", self)
					if err := roles.Lead(); err != nil {
						logger.Error(err, "Publishing the pending view")
					}
					leaderGauge.Set(1)
				},
				OnStoppedLeading: func() {
					roles.Demote()
					leaderGauge.Set(0)
					logger.Info("No longer leading", "identity", self)
				},
				OnNewLeader: func(id string) {
					if id != self {
						logger.Info("Following", "leader", id)
					}
					setLeader(id)
				},
			},
		})
		if err != nil {
			logger.Error(err, "Building the leader elector")
			return
		}
		le.Run(ctx)
	}
}

// followLeaders follows each new leader that is not this replica.
func followLeaders(ctx context.Context, self string, leaders <-chan string, follower *Follower) {
	logger := klog.FromContext(ctx).WithName("replication")
	stop, done := context.CancelFunc(func() {}), chan struct{}(nil)
	end := func() {
		stop()
		if done != nil {
			<-done
		}
		stop, done = func() {}, nil
	}
	defer end()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-leaders:
			end()
			if id == self || id == "" {
				continue
			}
			addr, ok := AddressOf(id)
			if !ok {
				logger.Info("The leader's identity names no address; waiting for another", "leader", id)
				continue
			}
			fctx, cancel := context.WithCancel(ctx)
			stop, done = cancel, make(chan struct{})
			go func(done chan struct{}) {
				defer close(done)
				follower.Run(fctx, addr)
			}(done)
		}
	}
}

// awaitTurn keeps a replica without state out of the election while a
// replica with state may take it: a fresh process that won the Lease would
// start a new timeline, and every client would relist. It follows a live
// leader until it holds a copy of the state; with no live leader it waits
// one LeaseDuration for a replica in step to take over (their electors
// retry every RetryPeriod). It campaigns at once when the Lease does not
// exist yet (the first start: nobody has state).
func awaitTurn(ctx context.Context, cfg ElectionConfig, roles Roles, setLeader func(string)) {
	logger := klog.FromContext(ctx).WithName("replication")
	self := cfg.Lock.Identity()
	deadline := time.Now().Add(cfg.LeaseDuration)
	for ctx.Err() == nil && !roles.HasState() {
		rec, _, err := cfg.Lock.Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			return
		case err != nil:
			logger.V(1).Info("Reading the election Lease", "err", err)
		case rec.HolderIdentity != "" && rec.HolderIdentity != self &&
			time.Since(rec.RenewTime.Time) < time.Duration(rec.LeaseDurationSeconds)*time.Second:
			setLeader(rec.HolderIdentity)
			deadline = time.Now().Add(cfg.LeaseDuration)
		}
		if time.Now().After(deadline) {
			logger.Info("No replica with state took the lead; campaigning", "waited", cfg.LeaseDuration)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(cfg.RetryPeriod):
		}
	}
}
