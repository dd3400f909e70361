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

package workload

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// InformerCheck compares one informer's cache with a quorum list.
type InformerCheck struct {
	Server int    `json:"server"`
	Kind   string `json:"kind"`
	Equal  bool   `json:"equal"`
	// Took is how long it took to get equal (the bound when it did not).
	Took time.Duration `json:"took"`
	// Missing, Extra, Stale: objects not in the cache, in the cache but
	// not stored, or cached at another resourceVersion.
	Missing int `json:"missing"`
	Extra   int `json:"extra"`
	Stale   int `json:"stale"`
}

// Informers are client-go informers, one per server and kind, over every
// namespace, as controllers pinned to one kube-apiserver run them.
type Informers struct {
	clients []dynamic.Interface
	run     string
	stopCh  chan struct{}
	once    sync.Once

	mu    sync.Mutex
	byKey map[string]cache.SharedIndexInformer // "<server>/<kind>"
}

// NewInformers makes the clients (configs[i] is server i's); Start starts
// informers.
func NewInformers(configs []*rest.Config, run string) (*Informers, error) {
	inf := &Informers{run: run, stopCh: make(chan struct{}), byKey: map[string]cache.SharedIndexInformer{}}
	for _, cfg := range configs {
		cfg = rest.CopyConfig(cfg)
		cfg.UserAgent = "workload-informer"
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		inf.clients = append(inf.clients, c)
	}
	return inf, nil
}

// Start starts an informer of k on every server and, with wait > 0,
// waits that long for them to sync.
func (inf *Informers) Start(ctx context.Context, k Kind, wait time.Duration) error {
	var synced []cache.InformerSynced
	for i, c := range inf.clients {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.LabelSelector = RunLabel + "=" + inf.run
		})
		si := f.ForResource(k.GVR).Informer()
		inf.mu.Lock()
		inf.byKey[fmt.Sprintf("%d/%s", i, k.Name)] = si
		inf.mu.Unlock()
		go si.Run(inf.stopCh)
		synced = append(synced, si.HasSynced)
	}
	if wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("the %s informers did not sync within %s", k.Name, wait)
	}
	return nil
}

// Stop stops every informer.
func (inf *Informers) Stop() { inf.once.Do(func() { close(inf.stopCh) }) }

// Converge compares every informer of the given servers (nil: all) with
// fresh quorum lists, every half second, until each equals one or the
// bound passes; it reports each informer as last compared.
func (inf *Informers) Converge(ctx context.Context, servers []int, kinds []Kind, quorum func(context.Context) (map[string][]unstructured.Unstructured, error), bound time.Duration) []InformerCheck {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	type key struct {
		server int
		kind   string
	}
	pending := map[key]cache.SharedIndexInformer{}
	var order []key
	for i := range inf.clients {
		if servers != nil && !slices.Contains(servers, i) {
			continue
		}
		for _, k := range kinds {
			if si, ok := inf.byKey[fmt.Sprintf("%d/%s", i, k.Name)]; ok {
				pending[key{i, k.Name}] = si
				order = append(order, key{i, k.Name})
			}
		}
	}
	got := map[key]InformerCheck{}
	start := time.Now()
	for len(pending) > 0 {
		lists, err := quorum(ctx)
		if err == nil {
			for kk, si := range pending {
				ic := diff(kk.server, kk.kind, si.GetStore(), lists[kk.kind])
				ic.Took = time.Since(start)
				got[kk] = ic
				if ic.Equal {
					delete(pending, kk)
				}
			}
		}
		if time.Since(start) > bound || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	var out []InformerCheck
	for _, kk := range order {
		ic, ok := got[kk]
		if !ok {
			ic = InformerCheck{Server: kk.server, Kind: kk.kind, Took: bound}
		}
		out = append(out, ic)
	}
	return out
}

func diff(server int, kind string, store cache.Store, want []unstructured.Unstructured) InformerCheck {
	ic := InformerCheck{Server: server, Kind: kind}
	seen := map[string]bool{}
	for _, w := range want {
		key := w.GetName()
		if w.GetNamespace() != "" {
			key = w.GetNamespace() + "/" + key
		}
		seen[key] = true
		obj, ok, _ := store.GetByKey(key)
		switch {
		case !ok:
			ic.Missing++
		case obj.(*unstructured.Unstructured).GetResourceVersion() != w.GetResourceVersion():
			ic.Stale++
		}
	}
	for _, key := range store.ListKeys() {
		if !seen[key] {
			ic.Extra++
		}
	}
	ic.Equal = ic.Missing == 0 && ic.Extra == 0 && ic.Stale == 0
	return ic
}
