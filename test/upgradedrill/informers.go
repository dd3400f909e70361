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
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// InformerCheck compares one informer's cache with the final quorum list.
type InformerCheck struct {
	Server int    `json:"server"`
	Kind   string `json:"kind"`
	Equal  bool   `json:"equal"`
	// Missing, Extra, Stale: objects not in the cache, in the cache but
	// not stored, or cached at another resourceVersion.
	Missing int `json:"missing"`
	Extra   int `json:"extra"`
	Stale   int `json:"stale"`
}

// informers are client-go informers, one per server and kind, as
// controllers pinned to one kube-apiserver would run them: Deployments
// from the start, the newer release's kind once a server serves it.
type informers struct {
	clients []dynamic.Interface
	run     string
	stopCh  chan struct{}
	once    sync.Once

	mu    sync.Mutex
	byKey map[string]cache.SharedIndexInformer // "<server>/<kind>"
}

func startInformers(ctx context.Context, configs []*rest.Config, run string) (*informers, error) {
	inf := &informers{run: run, stopCh: make(chan struct{}), byKey: map[string]cache.SharedIndexInformer{}}
	for _, cfg := range configs {
		cfg = rest.CopyConfig(cfg)
		cfg.UserAgent = "upgrade-drill-informer"
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		inf.clients = append(inf.clients, c)
	}
	var synced []cache.InformerSynced
	for _, k := range kinds {
		if k.name == "deployments" {
			synced = inf.start(k)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		inf.stop()
		return nil, fmt.Errorf("the Deployment informers did not sync within a minute")
	}
	return inf, nil
}

// startNewOnly starts the informers of the newer release's kinds.
func (inf *informers) startNewOnly() {
	for _, k := range kinds {
		if k.newOnly {
			inf.start(k)
		}
	}
}

func (inf *informers) start(k kind) []cache.InformerSynced {
	var synced []cache.InformerSynced
	ns := metav1.NamespaceAll
	if k.namespaced {
		ns = Namespace
	}
	for i, c := range inf.clients {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c, 0, ns, func(o *metav1.ListOptions) {
			o.LabelSelector = runLabel + "=" + inf.run
		})
		si := f.ForResource(k.gvr).Informer()
		inf.mu.Lock()
		inf.byKey[fmt.Sprintf("%d/%s", i, k.name)] = si
		inf.mu.Unlock()
		go si.Run(inf.stopCh)
		synced = append(synced, si.HasSynced)
	}
	return synced
}

func (inf *informers) stop() { inf.once.Do(func() { close(inf.stopCh) }) }

// compare waits up to a minute for every informer to reach the quorum
// lists, then reports each.
func (inf *informers) compare(ctx context.Context, lists map[string][]unstructured.Unstructured) []InformerCheck {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	var out []InformerCheck
	for i := range inf.clients {
		for _, k := range kinds {
			si, ok := inf.byKey[fmt.Sprintf("%d/%s", i, k.name)]
			if !ok {
				continue
			}
			var ic InformerCheck
			_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				ic = diff(i, k.name, si.GetStore(), lists[k.name])
				return ic.Equal, nil
			})
			out = append(out, ic)
		}
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
