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
	"io"
	"net/http"
	"path"
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
	// Took is how long it took to get equal, or until its bound passed,
	// from the check's start.
	Took time.Duration `json:"took"`
	// Waited is how long the informer's reflector waited, from the
	// check's start, before its first list or watch (0 if one was open):
	// its backoff, which the bound does not count (ReflectorBackoffBound).
	Waited time.Duration `json:"waited,omitempty"`
	// Missing, Extra, Stale: objects not in the cache, in the cache but
	// not stored, or cached at another resourceVersion.
	Missing int `json:"missing"`
	Extra   int `json:"extra"`
	Stale   int `json:"stale"`
}

// Informers are client-go informers, one per server and kind, over every
// namespace, as controllers pinned to one kube-apiserver run them.
type Informers struct {
	clients  []dynamic.Interface
	requests []*reflectorRequests // per server, as clients
	run      string
	stopCh   chan struct{}
	once     sync.Once

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
		reqs := newReflectorRequests()
		cfg.Wrap(reqs.wrap)
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		inf.clients = append(inf.clients, c)
		inf.requests = append(inf.requests, reqs)
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

// ReflectorBackoffBound is the longest client-go's reflector sleeps before
// it lists or watches again after a failure: its backoff doubles from 800
// ms to 30 s, with jitter of up to 100 % (tools/cache/reflector.go,
// defaultBackoffMax and defaultBackoffJitter: "[30,60) sec"). A reflector
// whose server was down may be in that sleep when an episode heals, and no
// server can shorten it. A request open when the check starts counts as
// the reflector's: if it then fails and the reflector sleeps, the bound
// counts from the start, as before.
const ReflectorBackoffBound = 60 * time.Second

// Converge compares every informer of the given servers (nil: all) with
// fresh quorum lists, every half second, until each equals one or its bound
// passes; it reports each informer as last compared. An informer's bound
// counts from the check's start if it had a list or watch open then, else
// from its reflector's first request after it (at most
// ReflectorBackoffBound later): what the servers had to converge it, not
// the client's own backoff.
func (inf *Informers) Converge(ctx context.Context, servers []int, kinds []Kind, quorum func(context.Context) (map[string][]unstructured.Unstructured, error), bound time.Duration) []InformerCheck {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	type key struct {
		server   int
		kind     string
		resource string
	}
	type pendingInformer struct {
		si    cache.SharedIndexInformer
		clock informerClock
	}
	start := time.Now()
	pending := map[key]*pendingInformer{}
	var order []key
	for i := range inf.clients {
		if servers != nil && !slices.Contains(servers, i) {
			continue
		}
		inf.requests[i].mark()
		for _, k := range kinds {
			if si, ok := inf.byKey[fmt.Sprintf("%d/%s", i, k.Name)]; ok {
				kk := key{i, k.Name, k.GVR.Resource}
				open, _ := inf.requests[i].state(kk.resource)
				pending[kk] = &pendingInformer{si: si, clock: informerClock{started: open > 0, from: start}}
				order = append(order, kk)
			}
		}
	}
	got := map[key]InformerCheck{}
	for len(pending) > 0 {
		now := time.Now()
		lists, err := quorum(ctx)
		for kk, p := range pending {
			_, first := inf.requests[kk.server].state(kk.resource)
			p.clock.advance(first, start, now)
			if err == nil {
				ic := diff(kk.server, kk.kind, p.si.GetStore(), lists[kk.kind])
				ic.Took, ic.Waited = time.Since(start), p.clock.from.Sub(start)
				got[kk] = ic
				if ic.Equal {
					delete(pending, kk)
					continue
				}
			}
			if p.clock.expired(bound, time.Now()) {
				delete(pending, kk)
			}
		}
		if ctx.Err() != nil {
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

// informerClock is when an informer's bound starts: at the check's start if
// a list or watch of its reflector was open then, else at the reflector's
// first request since, or ReflectorBackoffBound after the check's start if
// it made none by then.
type informerClock struct {
	started bool
	from    time.Time
}

// advance starts the clock, given the reflector's first request since the
// check's start (zero: none yet).
func (c *informerClock) advance(first, checkStart, now time.Time) {
	switch {
	case c.started:
	case !first.IsZero():
		c.started, c.from = true, first
	case now.Sub(checkStart) >= ReflectorBackoffBound:
		c.started, c.from = true, checkStart.Add(ReflectorBackoffBound)
	}
}

func (c *informerClock) expired(bound time.Duration, now time.Time) bool {
	return c.started && now.Sub(c.from) > bound
}

// reflectorRequests counts one server's informers' lists and watches per
// resource (the last element of the path: the informers list every
// namespace): how many are open, and when the first since mark was sent.
type reflectorRequests struct {
	mu    sync.Mutex
	open  map[string]int
	first map[string]time.Time
}

func newReflectorRequests() *reflectorRequests {
	return &reflectorRequests{open: map[string]int{}, first: map[string]time.Time{}}
}

func (r *reflectorRequests) mark() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.first)
}

func (r *reflectorRequests) state(resource string) (open int, first time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open[resource], r.first[resource]
}

func (r *reflectorRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resource := path.Base(req.URL.Path)
		r.mu.Lock()
		r.open[resource]++
		if _, ok := r.first[resource]; !ok {
			r.first[resource] = time.Now()
		}
		r.mu.Unlock()
		done := sync.OnceFunc(func() {
			r.mu.Lock()
			r.open[resource]--
			r.mu.Unlock()
		})
		resp, err := rt.RoundTrip(req)
		if err != nil {
			done()
			return nil, err
		}
		resp.Body = &closeFunc{ReadCloser: resp.Body, done: done}
		return resp, nil
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// closeFunc calls done when the body is closed: a watch is open until then.
type closeFunc struct {
	io.ReadCloser
	done func()
}

func (c *closeFunc) Close() error {
	defer c.done()
	return c.ReadCloser.Close()
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
