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

package apiserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/engine"
)

var (
	leadingGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      "peerdiscovery",
		Name:           "replica_leading",
		Help:           "1 on the replica elected to emit Events (the holder of the election Lease), 0 on the others. Every replica computes and serves its own view.",
		StabilityLevel: metrics.ALPHA,
	})
	registerLeading sync.Once
)

// eventVoice elects, with a client-go Lease lock, the one replica whose
// engine emits Events. Every replica's engine sees the same transitions;
// one voice keeps kubectl describe from listing each of them once per
// replica.
type eventVoice struct {
	config  leaderelection.LeaderElectionConfig
	leading atomic.Bool
}

func newEventVoice(ec *EventElectionConfig, clients engine.Clients) (*eventVoice, error) {
	registerLeading.Do(func() { legacyregistry.MustRegister(leadingGauge) })
	le := ec.LeaderElection
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName,
		clients.Kube.CoreV1(), clients.Kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: ec.Identity})
	if err != nil {
		return nil, fmt.Errorf("leader election lock: %w", err)
	}
	v := &eventVoice{}
	v.config = leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration.Duration,
		RenewDeadline:   le.RenewDeadline.Duration,
		RetryPeriod:     le.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            "peerdiscovery-apiserver",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				v.leading.Store(true)
				leadingGauge.Set(1)
				klog.FromContext(ctx).Info("Elected: this replica emits the Events", "identity", ec.Identity)
			},
			OnStoppedLeading: func() {
				v.leading.Store(false)
				leadingGauge.Set(0)
			},
		},
	}
	if _, err := leaderelection.NewLeaderElector(v.config); err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return v, nil
}

// run campaigns until ctx is done, again after each lost lease; the lease
// is released when ctx ends, so another replica speaks within RetryPeriod.
func (v *eventVoice) run(ctx context.Context) {
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(v.config) // validated in newEventVoice
		if err != nil {
			klog.FromContext(ctx).Error(err, "Building the leader elector")
			return
		}
		le.Run(ctx)
	}
}
