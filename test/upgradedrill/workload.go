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
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// userAgentPrefix + the index of the server a request was sent to is the
// workload's User-Agent.
const userAgentPrefix = "upgrade-drill/via-"

// Sample is one operation as the client saw it, after client-go's retries.
type Sample struct {
	At    time.Duration `json:"at"`
	Took  time.Duration `json:"took"`
	Phase int           `json:"phase"`
	// Server is the kube-apiserver the client sent it to.
	Server int    `json:"server"`
	Kind   string `json:"kind"`
	Verb   string `json:"verb"`
	// Code is the final HTTP status; 0 when no response came.
	Code int    `json:"code"`
	Err  string `json:"err,omitempty"`
}

// Attempt is one HTTP request on the wire (client-go may send several for
// one operation: it retries 429 and 5xx answers that carry Retry-After).
type Attempt struct {
	At         time.Duration `json:"at"`
	Phase      int           `json:"phase"`
	Server     int           `json:"server"`
	Code       int           `json:"code"`
	RetryAfter bool          `json:"retryAfter,omitempty"`
}

// createRecord is what the workload knows of one create.
type createRecord struct {
	Kind string `json:"kind"`
	Op   int64  `json:"op"`
	// Acked: the client got 201 (and the object's name).
	Acked bool   `json:"acked"`
	Name  string `json:"name,omitempty"`
	// DeleteAcked: a later delete of it got 200.
	DeleteAcked bool `json:"deleteAcked,omitempty"`
	// DeleteUncertain: a later delete may or may not have happened.
	DeleteUncertain bool `json:"deleteUncertain,omitempty"`
}

// liveObject is an acked object the workload may read, update or delete;
// its lock keeps one operation on it at a time, so a 404 for it is false.
type liveObject struct {
	mu    sync.Mutex
	rec   *createRecord
	last  *unstructured.Unstructured
	stale bool // the last write's outcome is unknown: GET before updating
	gone  bool
}

type workload struct {
	plan    Plan
	run     string
	start   time.Time
	clients []dynamic.Interface
	// inRotation: the load balancer sends new requests to the server.
	inRotation []atomic.Bool
	// newServed: some ready server serves the newer release's kinds.
	newServed atomic.Bool
	phase     atomic.Int32
	nextOp    atomic.Int64
	rr        atomic.Uint64

	mu       sync.Mutex
	rnd      *rand.Rand
	samples  []Sample
	attempts []Attempt
	creates  []*createRecord
	live     map[string][]*liveObject // by kind
	skipped  int                      // every worker busy
}

func newWorkload(plan Plan, run string, configs []*rest.Config) (*workload, error) {
	w := &workload{plan: plan, run: run, rnd: rand.New(rand.NewSource(plan.Seed)), live: map[string][]*liveObject{},
		inRotation: make([]atomic.Bool, len(configs))}
	for i, cfg := range configs {
		cfg = rest.CopyConfig(cfg)
		// The server the client sent it to, in every request: proxies keep
		// the User-Agent, so the audit log of the server that finally
		// serves it tells who proxied it (the convergence figures).
		cfg.UserAgent = fmt.Sprintf("%s%d", userAgentPrefix, i)
		cfg.QPS, cfg.Burst = 1000, 1000
		cfg.Timeout = 30 * time.Second
		server := i
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recorder{w: w, server: server, next: rt} })
		c, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		w.clients = append(w.clients, c)
		w.inRotation[i].Store(true)
	}
	return w, nil
}

// recorder notes every HTTP attempt.
type recorder struct {
	w      *workload
	server int
	next   http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	at := time.Since(r.w.start)
	resp, err := r.next.RoundTrip(req)
	a := Attempt{At: at, Phase: int(r.w.phase.Load()), Server: r.server}
	if err == nil {
		a.Code, a.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
	}
	r.w.mu.Lock()
	r.w.attempts = append(r.w.attempts, a)
	r.w.mu.Unlock()
	return resp, err
}

// Run issues operations at the plan's rate until ctx ends or MaxDuration
// passes; every loop is bounded by both.
func (w *workload) Run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.plan.MaxDuration)
	defer cancel()
	sem := make(chan struct{}, w.plan.Workers)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(w.plan.Rate))
	defer tick.Stop()
	for max := int(w.plan.MaxDuration.Seconds()) * w.plan.Rate; max > 0; max-- {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			w.mu.Lock()
			w.skipped++
			w.mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.operate(ctx)
		}()
	}
	wg.Wait()
}

var verbWeights = []struct {
	verb   string
	weight int
}{{"create", 20}, {"get", 25}, {"list", 20}, {"update", 15}, {"delete", 12}, {"watch", 8}}

// pick chooses the operation, the kind and (for get, update, delete) a
// live object, under the seeded random source.
func (w *workload) pick() (string, kind, *liveObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ks []kind
	for _, k := range kinds {
		if !k.newOnly || w.newServed.Load() {
			ks = append(ks, k)
		}
	}
	k := ks[w.rnd.Intn(len(ks))]
	n := w.rnd.Intn(100)
	verb := "create"
	for _, vw := range verbWeights {
		if n < vw.weight {
			verb = vw.verb
			break
		}
		n -= vw.weight
	}
	if verb == "get" || verb == "update" || verb == "delete" {
		pool := w.live[k.name]
		if len(pool) == 0 {
			return "create", k, nil
		}
		return verb, k, pool[w.rnd.Intn(len(pool))]
	}
	return verb, k, nil
}

func (w *workload) server() int {
	n := len(w.clients)
	for range n {
		i := int(w.rr.Add(1) % uint64(n))
		if w.inRotation[i].Load() {
			return i
		}
	}
	return int(w.rr.Load() % uint64(n))
}

func (w *workload) resource(k kind, server int) dynamic.ResourceInterface {
	r := w.clients[server].Resource(k.gvr)
	if k.namespaced {
		return r.Namespace(Namespace)
	}
	return r
}

func (w *workload) operate(ctx context.Context) {
	verb, k, obj := w.pick()
	if obj != nil {
		obj.mu.Lock()
		defer obj.mu.Unlock()
		if obj.gone {
			return
		}
	}
	server := w.server()
	s := Sample{At: time.Since(w.start), Phase: int(w.phase.Load()), Server: server, Kind: k.name, Verb: verb}
	res := w.resource(k, server)
	selector := metav1.ListOptions{LabelSelector: runLabel + "=" + w.run}
	var err error
	switch verb {
	case "create":
		op := w.nextOp.Add(1)
		rec := &createRecord{Kind: k.name, Op: op}
		w.mu.Lock()
		w.creates = append(w.creates, rec)
		w.mu.Unlock()
		var out *unstructured.Unstructured
		if out, err = res.Create(ctx, k.newObject(w.run, op), metav1.CreateOptions{}); err == nil {
			rec.Acked, rec.Name = true, out.GetName()
			w.mu.Lock()
			w.live[k.name] = append(w.live[k.name], &liveObject{rec: rec, last: out})
			w.mu.Unlock()
		}
	case "get":
		var out *unstructured.Unstructured
		if out, err = res.Get(ctx, obj.rec.Name, metav1.GetOptions{}); err == nil {
			obj.last, obj.stale = out, false
		}
	case "list":
		selector.Limit = 50
		_, err = res.List(ctx, selector)
	case "update":
		if obj.stale {
			s.Verb = "get"
			if out, gerr := res.Get(ctx, obj.rec.Name, metav1.GetOptions{}); gerr == nil {
				obj.last, obj.stale = out, false
			} else {
				err = gerr
			}
			break
		}
		u := obj.last.DeepCopy()
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["peerdiscovery.k8s.io/drill-update"] = strconv.FormatInt(w.nextOp.Add(1), 10)
		u.SetAnnotations(ann)
		var out *unstructured.Unstructured
		if out, err = res.Update(ctx, u, metav1.UpdateOptions{}); err == nil {
			obj.last = out
		} else {
			obj.stale = true
		}
	case "delete":
		err = res.Delete(ctx, obj.rec.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			// A false 404 (counted below): the object exists, as only
			// this workload deletes it, and it stays in use.
			break
		}
		obj.gone = true
		w.mu.Lock()
		if err == nil {
			obj.rec.DeleteAcked = true
		} else {
			obj.rec.DeleteUncertain = true
		}
		pool := w.live[k.name]
		for i, o := range pool {
			if o == obj {
				w.live[k.name] = append(pool[:i], pool[i+1:]...)
				break
			}
		}
		w.mu.Unlock()
	case "watch":
		timeout := int64(2)
		selector.TimeoutSeconds = &timeout
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var wi interface{ Stop() }
		if wi, err = res.Watch(wctx, selector); err == nil {
			wi.Stop()
		}
		cancel()
	}
	s.Took = time.Since(w.start) - s.At
	s.Code = 200
	if err != nil {
		s.Code, s.Err = codeOf(err), truncate(err.Error(), 200)
		if ctx.Err() != nil {
			return // the workload ended while it ran: not an outcome
		}
	}
	w.mu.Lock()
	w.samples = append(w.samples, s)
	w.mu.Unlock()
}

func codeOf(err error) int {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return int(st.Status().Code)
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
