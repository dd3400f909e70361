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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
)

// Replica is the side a Follower writes into (the ViewStore).
type Replica interface {
	Clock() *memstore.Clock
	// MarkReplicated records word from the leader; it keeps the replica ready.
	MarkReplicated()
}

// DialFunc returns a client for the leader at address (host:port) and the
// base URL to use with it.
type DialFunc func(ctx context.Context, address string) (*http.Client, string, error)

// Follower copies a leader's stores into Replica.
type Follower struct {
	Replica Replica
	Dial    DialFunc
	// Silence ends a stream without a frame for this long; 0 means three
	// ProgressIntervals.
	Silence time.Duration
}

const (
	retryMin = 500 * time.Millisecond
	retryMax = 5 * time.Second
)

// Run follows the leader at address until ctx is done, reconnecting with
// backoff. A reconnect starts from a snapshot; stores still in step keep
// their watchers (memstore.Clock.Restore).
func (f *Follower) Run(ctx context.Context, address string) {
	logger := klog.FromContext(ctx).WithValues("leader", address)
	wait := retryMin
	for ctx.Err() == nil {
		started := time.Now()
		err := f.Follow(ctx, address)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			wait = retryMin // the stream was healthy: not a failure loop
		}
		logger.Info("Replication stream ended; reconnecting", "err", err, "after", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// Follow reads one stream from the leader at address until it fails or ctx
// is done. It returns why the stream ended.
func (f *Follower) Follow(ctx context.Context, address string) error {
	client, base, err := f.Dial(ctx, address)
	if err != nil {
		return err
	}
	silence := f.Silence
	if silence <= 0 {
		silence = 3 * ProgressInterval
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(silence, func() { cancel(fmt.Errorf("no word from the leader for %s", silence)) })
	defer watchdog.Stop()

	clock := f.Replica.Clock()
	url := base + Path
	if cur := clock.Current(); cur != 0 {
		url += "?" + FromParam + "=" + strconv.FormatUint(cur, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return withCause(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s%s: %s: %s", base, Path, resp.Status, body)
	}
	dec := json.NewDecoder(resp.Body)
	synced := false
	for {
		var fr frame
		if err := dec.Decode(&fr); err != nil {
			return withCause(ctx, fmt.Errorf("reading the stream: %w", err))
		}
		watchdog.Reset(silence)
		switch {
		case fr.Snapshot != nil && !synced:
			snap, err := decodeSnapshot(clock.NewObject, fr.Snapshot)
			if err != nil {
				return err
			}
			if err := clock.Restore(snap); err != nil {
				return fmt.Errorf("installing the leader's snapshot: %w", err)
			}
			synced = true
			klog.FromContext(ctx).Info("Replica installed its leader's snapshot", "resourceVersion", snap.Timeline.Current)
		case fr.Resume != nil && !synced:
			replay, err := decodeReplay(clock.NewObject, fr.Resume)
			if err != nil {
				return err
			}
			if err := clock.Resume(fr.Resume.Timeline, replay); err != nil {
				return fmt.Errorf("resuming from the leader's changes: %w", err)
			}
			synced = true
			klog.FromContext(ctx).Info("Replica resumed in step with its leader", "batches", len(replay), "resourceVersion", fr.Resume.Timeline.Current)
		case fr.Batch != nil && synced:
			b, err := decodeBatch(clock.NewObject, fr.Batch)
			if err != nil {
				return err
			}
			if err := clock.Apply(b); err != nil {
				return fmt.Errorf("applying the leader's changes: %w", err)
			}
		case fr.Progress != nil && synced:
		default:
			return errors.New("unexpected frame: a stream is one snapshot or resume, then changes and progress")
		}
		f.Replica.MarkReplicated()
	}
}

func withCause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c
	}
	return err
}

// APIServiceDialer reaches other replicas as the aggregator does: TLS
// verified against the APIService's caBundle for its Service's DNS name,
// with this replica's own credentials (Base).
type APIServiceDialer struct {
	Base       *rest.Config
	Aggregator aggregatorclient.Interface
	APIService string
}

// Dial implements DialFunc.
func (d *APIServiceDialer) Dial(ctx context.Context, address string) (*http.Client, string, error) {
	as, err := d.Aggregator.ApiregistrationV1().APIServices().Get(ctx, d.APIService, metav1.GetOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("reading APIService %s for the replicas' CA: %w", d.APIService, err)
	}
	if as.Spec.Service == nil {
		return nil, "", fmt.Errorf("APIService %s has no service: its replicas cannot be verified", d.APIService)
	}
	if len(as.Spec.CABundle) == 0 {
		return nil, "", fmt.Errorf("APIService %s has no caBundle: refusing to reach replicas without verifying them", d.APIService)
	}
	cfg := rest.CopyConfig(d.Base)
	cfg.Host = "https://" + address
	cfg.APIPath = ""
	cfg.Timeout = 0
	cfg.TLSClientConfig.Insecure = false
	cfg.TLSClientConfig.CAFile = ""
	cfg.TLSClientConfig.CAData = as.Spec.CABundle
	cfg.TLSClientConfig.ServerName = as.Spec.Service.Name + "." + as.Spec.Service.Namespace + ".svc"
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", err
	}
	return client, cfg.Host, nil
}
