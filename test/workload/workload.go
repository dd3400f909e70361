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
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Config is one workload.
type Config struct {
	// Run labels every object it writes (RunLabel).
	Run string
	// Namespace holds namespaced objects besides the short-lived
	// namespaces; SetUp creates it.
	Namespace string
	// Kinds are the resources it uses.
	Kinds []Kind
	// Rate is operations per second over all servers; Workers bounds the
	// operations in flight (one that finds every worker busy is skipped
	// and counted).
	Rate, Workers int
	// MaxDuration bounds Run whatever happens.
	MaxDuration time.Duration
	// Seed makes the operation mix repeatable (math/rand/v2).
	Seed uint64
	// UserAgent + the index of the server a request is sent to is every
	// request's User-Agent: proxies keep it, so the audit log of the
	// server that finally serves a request names the one that got it.
	UserAgent string
	// Sendable says whether an operation on k may be sent now (nil:
	// always), e.g. not before some ready server serves it.
	Sendable func(k Kind) bool
	// NamespaceEvery is the pause between two short-lived namespaces (0:
	// none); each lives NamespaceLife (objects are created in it), then is
	// deleted.
	NamespaceEvery, NamespaceLife time.Duration
	// OnSample and OnAttempt, when set, see every operation and HTTP
	// attempt as it is recorded (online checks).
	OnSample  func(Sample)
	OnAttempt func(Attempt)
}

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
	At    time.Duration `json:"at"`
	Took  time.Duration `json:"took"`
	Phase int           `json:"phase"`
	// Server is the kube-apiserver it was sent to.
	Server int    `json:"server"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Kind is the workload's kind of the path's resource ("namespaces"
	// for the namespace lifecycle; "" for another path).
	Kind       string `json:"kind,omitempty"`
	Code       int    `json:"code"`
	RetryAfter bool   `json:"retryAfter,omitempty"`
}

// CreateRecord is what the workload knows of one create.
type CreateRecord struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Op        int64  `json:"op"`
	// Acked: the client got 201 (and the object's name).
	Acked bool   `json:"acked"`
	Name  string `json:"name,omitempty"`
	// DeleteAcked: a later delete of it got 200.
	DeleteAcked bool `json:"deleteAcked,omitempty"`
	// DeleteUncertain: a later delete may or may not have happened.
	DeleteUncertain bool `json:"deleteUncertain,omitempty"`
	// NamespaceDeleted: its namespace was deleted (CheckNamespaces
	// checks that it went with it).
	NamespaceDeleted bool `json:"namespaceDeleted,omitempty"`
}

// liveObject is an acked object the workload may read, update or delete;
// its lock keeps one operation on it at a time, so a 404 for it is false.
type liveObject struct {
	mu    sync.Mutex
	rec   *CreateRecord
	last  *unstructured.Unstructured
	stale bool // the last write's outcome is unknown: GET before updating
	gone  bool
}

// namespace is one namespace objects are created in.
type namespace struct {
	name        string
	terminating bool
	creates     sync.WaitGroup // creates in flight into it
}

// Workload issues the operations; its methods are safe for concurrent use.
type Workload struct {
	cfg     Config
	start   time.Time
	clients []dynamic.Interface
	// inRotation: the load balancer sends new requests to the server.
	inRotation []atomic.Bool
	phase      atomic.Int32
	nextOp     atomic.Int64
	rr         atomic.Uint64
	// writes is read-locked by every write; PauseWrites locks it.
	writes sync.RWMutex

	mu         sync.Mutex
	rnd        *rand.Rand
	samples    []Sample
	attempts   []Attempt
	creates    []*CreateRecord
	live       map[string][]*liveObject // by kind
	namespaces []*namespace
	nsRecords  []*NamespaceRecord
	skipped    int // every worker busy
}

// New makes a workload over one client per server (configs[i] is server
// i's admin config). Times are measured from start.
func New(cfg Config, configs []*rest.Config, start time.Time) (*Workload, error) {
	w := &Workload{cfg: cfg, start: start, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), live: map[string][]*liveObject{},
		inRotation: make([]atomic.Bool, len(configs)), namespaces: []*namespace{{name: cfg.Namespace}}}
	for i, rc := range configs {
		rc = rest.CopyConfig(rc)
		rc.UserAgent = fmt.Sprintf("%s%d", cfg.UserAgent, i)
		rc.QPS, rc.Burst = 1000, 1000
		rc.Timeout = 30 * time.Second
		server := i
		rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recorder{w: w, server: server, next: rt} })
		c, err := dynamic.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		w.clients = append(w.clients, c)
		w.inRotation[i].Store(true)
	}
	return w, nil
}

// Since is the time since the workload's start.
func (w *Workload) Since() time.Duration { return time.Since(w.start) }

// SetPhase tags what is recorded from now on.
func (w *Workload) SetPhase(p int) { w.phase.Store(int32(p)) }

// SetInRotation puts server i in or out of the load balancer's rotation.
func (w *Workload) SetInRotation(i int, in bool) { w.inRotation[i].Store(in) }

// PauseWrites waits for the writes in flight and turns every write into a
// list of its kind until ResumeWrites (the checks against quorum lists
// need the writes to stop, the reads may go on).
func (w *Workload) PauseWrites() { w.writes.Lock() }

// ResumeWrites ends PauseWrites.
func (w *Workload) ResumeWrites() { w.writes.Unlock() }

// Records is everything recorded so far.
type Records struct {
	Samples    []Sample
	Attempts   []Attempt
	Creates    []*CreateRecord
	Namespaces []*NamespaceRecord
	Skipped    int
}

// Records returns what was recorded (the slices are not copied: call it
// after Run returned).
func (w *Workload) Records() Records {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Records{Samples: w.samples, Attempts: w.attempts, Creates: w.creates, Namespaces: w.nsRecords, Skipped: w.skipped}
}

// recorder notes every HTTP attempt.
type recorder struct {
	w      *Workload
	server int
	next   http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	at := r.w.Since()
	resp, err := r.next.RoundTrip(req)
	a := Attempt{At: at, Took: r.w.Since() - at, Phase: int(r.w.phase.Load()), Server: r.server, Method: req.Method, Path: req.URL.Path, Kind: r.w.kindOf(req)}
	if err == nil {
		a.Code, a.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After") != ""
	}
	r.w.mu.Lock()
	r.w.attempts = append(r.w.attempts, a)
	r.w.mu.Unlock()
	if r.w.cfg.OnAttempt != nil {
		r.w.cfg.OnAttempt(a)
	}
	return resp, err
}

// requestInfo parses paths as kube-apiserver does.
var requestInfo = &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// kindOf names the workload's kind of a request's resource, "" if none.
func (w *Workload) kindOf(req *http.Request) string {
	info, err := requestInfo.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return ""
	}
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	if gvr == NamespacesGVR {
		return NamespacesGVR.Resource
	}
	for _, k := range w.cfg.Kinds {
		if k.GVR == gvr {
			return k.Name
		}
	}
	return ""
}

// Run issues operations at the configured rate, and the namespace
// lifecycle, until ctx ends or MaxDuration passes; every loop is bounded
// by both.
func (w *Workload) Run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.MaxDuration)
	defer cancel()
	var wg sync.WaitGroup
	if w.cfg.NamespaceEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); w.namespaceLifecycle(ctx) }()
	}
	sem := make(chan struct{}, w.cfg.Workers)
	tick := time.NewTicker(time.Second / time.Duration(w.cfg.Rate))
	defer tick.Stop()
	for n := int(w.cfg.MaxDuration.Seconds()) * w.cfg.Rate; n > 0; n-- {
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
