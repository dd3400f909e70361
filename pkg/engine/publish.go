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

package engine

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
)

// Publisher receives the engine's views. The engine publishes after every
// recomputation and at least once per refresh interval, even when nothing
// changed: that heartbeat is what keeps peerdiscovery-apiserver ready.
// Each view replaces everything before it.
type Publisher interface {
	Publish(compute.Output) error
}

// publish computes the view from every peer's state and hands it over.
func (e *Engine) publish() error {
	in := compute.Input{ClusterWide: e.lastClusterWide}
	if len(e.deletedGVs) > 0 {
		deleted := e.deletedGVs
		in.Excluded = func(g, v string) bool { return deleted[schema.GroupVersion{Group: g, Version: v}] }
	}
	ready, notReady, left := 0, 0, 0
	for _, p := range e.peers {
		in.Peers = append(in.Peers, p.Peer)
		switch {
		case p.Left:
			left++
		case p.Ready:
			ready++
		default:
			notReady++
		}
	}
	peersGauge.WithLabelValues("ready").Set(float64(ready))
	peersGauge.WithLabelValues("not_ready").Set(float64(notReady))
	peersGauge.WithLabelValues("left").Set(float64(left))
	start := time.Now()
	out, err := compute.Compute(in)
	computeDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	routable := make(map[string]bool, len(in.Peers))
	for _, p := range in.Peers {
		routable[p.ServerID] = v1alpha1.PeerReady(p.Ready, p.Left)
	}
	notAll, unavailable := 0, 0
	for i := range out.Routes {
		st := &out.Routes[i].Status
		if !st.ServedByAll {
			notAll++
		}
		if !slices.ContainsFunc(st.Peers, func(p v1alpha1.RoutingPeer) bool { return routable[p.ServerID] }) {
			unavailable++
		}
	}
	routesGauge.WithLabelValues("all").Set(float64(len(out.Routes)))
	routesGauge.WithLabelValues("not_served_by_all").Set(float64(notAll))
	routesGauge.WithLabelValues("unavailable").Set(float64(unavailable))
	return e.publisher.Publish(out)
}
