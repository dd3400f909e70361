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

package integration

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/compute"
	"sigs.k8s.io/peerdiscovery/pkg/engine"
	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// latestView records what the engine publishes.
type latestView struct {
	mu   sync.Mutex
	view compute.Output
}

func (l *latestView) Publish(v compute.Output) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.view = v
	return nil
}

func (l *latestView) peer(id string) (v1alpha1.APIServerPeer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.view.Peers {
		if p.Spec.ServerID == id {
			return p, true
		}
	}
	return v1alpha1.APIServerPeer{}, false
}

func peerReady(p v1alpha1.APIServerPeer) (bool, string) {
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue, c.Reason
		}
	}
	return false, ""
}

// TestEngineOnRealLeases runs the peer engine against the real
// kube-apiserver: the server's own registration Lease (published by the
// filter linked into it) makes it a ready peer, scraped for real over TLS;
// a Lease created here for an address nothing listens on makes a peer that
// joins not ready, leaves when its Lease is deleted, and is removed when
// its tombstone expires.
func TestEngineOnRealLeases(t *testing.T) {
	needCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := cluster.AdminConfig(0)
	clients, err := engine.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := *engine.NewOptions()
	opts.RefreshInterval = 500 * time.Millisecond
	opts.ScrapeTimeout = 2 * time.Second
	opts.TombstonePeriod = 3 * time.Second
	out := &latestView{}
	cc, err := engine.Config{Options: opts, Clients: clients, Publisher: out, RESTConfig: cfg}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := cc.New()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = eng.Run(ctx) }()

	kube := kubernetes.NewForConfigOrDie(cfg)
	// The real server: its ID is the holder of its registration Lease.
	serverIP := cluster.Servers()[0].IP
	var realID string
	planetest.WaitFor(t, time.Minute, "the real kube-apiserver as a ready peer", func() error {
		leases, err := kube.CoordinationV1().Leases(peerlease.Namespace).List(ctx, metav1.ListOptions{LabelSelector: peerlease.RegistrationLabel})
		if err != nil {
			return err
		}
		for _, l := range leases.Items {
			if r, err := peerlease.ParseRegistration(&l); err == nil {
				if host, _, _ := net.SplitHostPort(r.Endpoint); host == serverIP {
					realID = r.ServerID
				}
			}
		}
		p, ok := out.peer(realID)
		if !ok {
			return fmt.Errorf("no peer %q yet", realID)
		}
		if ready, reason := peerReady(p); !ready {
			return fmt.Errorf("not ready: %s %s", reason, p.Status.LastError)
		}
		if p.Spec.BinaryVersion != "v1.37.2" || p.Status.ResourceCount == 0 {
			return fmt.Errorf("scrape incomplete: %+v", p.Spec)
		}
		return nil
	})

	// A peer nobody serves: joins, not ready.
	ghostIP := fmt.Sprintf("10.254.80.%d", 99)
	lease := peerlease.NewRegistrationLease(nil, "ghost-apiserver", net.JoinHostPort(ghostIP, "6443"), "v1.38.0", "", time.Now())
	if _, err := kube.CoordinationV1().Leases(peerlease.Namespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, time.Minute, "the ghost peer joins, not ready", func() error {
		p, ok := out.peer("ghost-apiserver")
		if !ok {
			return fmt.Errorf("not joined")
		}
		if ready, reason := peerReady(p); ready || reason == "Pending" || p.Status.LastError == "" {
			return fmt.Errorf("ready=%v reason=%s", ready, reason)
		}
		return nil
	})
	p, _ := out.peer("ghost-apiserver")
	_, reason := peerReady(p)
	t.Logf("ghost peer: reason %s, error %q", reason, p.Status.LastError)

	// Deleted lease: left (tombstoned), then gone.
	if err := kube.CoordinationV1().Leases(peerlease.Namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	planetest.WaitFor(t, 30*time.Second, "the ghost peer left", func() error {
		p, ok := out.peer("ghost-apiserver")
		if !ok || p.Status.LeftTime == nil {
			return fmt.Errorf("not marked left: %v", ok)
		}
		return nil
	})
	planetest.WaitFor(t, 30*time.Second, "the ghost's tombstone expires", func() error {
		if _, ok := out.peer("ghost-apiserver"); ok {
			return fmt.Errorf("still listed")
		}
		return nil
	})
	if p, ok := out.peer(realID); !ok {
		t.Fatal("the real peer disappeared")
	} else if ready, reason := peerReady(p); !ready {
		t.Fatalf("the real peer is not ready: %s", reason)
	}
}
