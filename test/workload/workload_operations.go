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
	"errors"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

var verbWeights = []struct {
	verb   string
	weight int
}{{"create", 20}, {"get", 25}, {"list", 20}, {"update", 15}, {"delete", 12}, {"watch", 8}}

// pick chooses the operation, the kind, (for get, update, delete) a live
// object and (for a namespaced create) a namespace, under the seeded
// random source. A create's namespace has its in-flight count raised.
func (w *Workload) pick() (string, Kind, *liveObject, *namespace) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ks []Kind
	for _, k := range w.cfg.Kinds {
		if w.cfg.Sendable == nil || w.cfg.Sendable(k) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return "", Kind{}, nil, nil
	}
	k := ks[w.rnd.IntN(len(ks))]
	n := w.rnd.IntN(100)
	verb := "create"
	for _, vw := range verbWeights {
		if n < vw.weight {
			verb = vw.verb
			break
		}
		n -= vw.weight
	}
	if verb == "get" || verb == "update" || verb == "delete" {
		if pool := w.live[k.Name]; len(pool) > 0 {
			return verb, k, pool[w.rnd.IntN(len(pool))], nil
		}
		verb = "create"
	}
	if verb != "create" || !k.Namespaced {
		return verb, k, nil, nil
	}
	var open []*namespace
	for _, ns := range w.namespaces {
		if !ns.terminating {
			open = append(open, ns)
		}
	}
	ns := open[w.rnd.IntN(len(open))]
	ns.creates.Add(1)
	return verb, k, nil, ns
}

// server is the next server in rotation (round robin).
func (w *Workload) server() int {
	n := len(w.clients)
	for range n {
		i := int(w.rr.Add(1) % uint64(n))
		if w.inRotation[i].Load() {
			return i
		}
	}
	return int(w.rr.Load() % uint64(n))
}

func (w *Workload) resource(k Kind, server int, ns string) dynamic.ResourceInterface {
	r := w.clients[server].Resource(k.GVR)
	if k.Namespaced {
		return r.Namespace(ns)
	}
	return r
}

func (w *Workload) operate(ctx context.Context) {
	verb, k, obj, ns := w.pick()
	if verb == "" {
		return
	}
	if ns != nil {
		defer ns.creates.Done()
	}
	if verb == "create" || verb == "update" || verb == "delete" {
		if !w.writes.TryRLock() {
			if obj != nil { // paused: read it instead
				verb = "get"
			} else {
				verb = "list"
			}
		} else {
			defer w.writes.RUnlock()
		}
	}
	if obj != nil {
		obj.mu.Lock()
		defer obj.mu.Unlock()
		if obj.gone {
			return
		}
	}
	server := w.server()
	s := Sample{At: w.Since(), Phase: int(w.phase.Load()), Server: server, Kind: k.Name, Verb: verb}
	selector := metav1.ListOptions{LabelSelector: RunLabel + "=" + w.cfg.Run}
	var err error
	switch verb {
	case "create":
		nsName := ""
		if ns != nil {
			nsName = ns.name
		}
		res := w.resource(k, server, nsName)
		op := w.nextOp.Add(1)
		rec := &CreateRecord{Kind: k.Name, Namespace: nsName, Op: op}
		w.mu.Lock()
		w.creates = append(w.creates, rec)
		w.mu.Unlock()
		var out *unstructured.Unstructured
		if out, err = res.Create(ctx, k.NewObject(w.cfg.Run, nsName, op), metav1.CreateOptions{}); err == nil {
			rec.Acked, rec.Name = true, out.GetName()
			w.mu.Lock()
			w.live[k.Name] = append(w.live[k.Name], &liveObject{rec: rec, last: out})
			w.mu.Unlock()
		}
	case "get":
		var out *unstructured.Unstructured
		if out, err = w.resource(k, server, obj.rec.Namespace).Get(ctx, obj.rec.Name, metav1.GetOptions{}); err == nil {
			obj.last, obj.stale = out, false
		}
	case "list":
		selector.Limit = 50
		_, err = w.clients[server].Resource(k.GVR).List(ctx, selector)
	case "update":
		err = w.update(ctx, w.resource(k, server, obj.rec.Namespace), obj)
	case "delete":
		err = w.resource(k, server, obj.rec.Namespace).Delete(ctx, obj.rec.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			// A false 404 (the object exists, as only this workload
			// deletes it): it stays in use.
			break
		}
		obj.gone = true
		w.mu.Lock()
		if err == nil {
			obj.rec.DeleteAcked = true
		} else {
			obj.rec.DeleteUncertain = true
		}
		w.removeLive(k.Name, obj)
		w.mu.Unlock()
	case "watch":
		// The server ends it after 2 s; the client waits for its headers
		// up to 15 s, so a watch hung on a peer shows as a long attempt.
		timeout := int64(2)
		selector.TimeoutSeconds = &timeout
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		var wi interface{ Stop() }
		if wi, err = w.clients[server].Resource(k.GVR).Watch(wctx, selector); err == nil {
			wi.Stop()
		}
		cancel()
	}
	w.record(ctx, s, err)
}

// update writes an annotation on the object as the workload last read
// it; on a conflict (a controller wrote it since: the deployment
// controller's status) it reads it again and retries, as clients do
// (client-go's retry.RetryOnConflict).
func (w *Workload) update(ctx context.Context, res dynamic.ResourceInterface, obj *liveObject) error {
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if obj.stale || !first {
			out, err := res.Get(ctx, obj.rec.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			obj.last, obj.stale = out, false
		}
		first = false
		u := obj.last.DeepCopy()
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["peerdiscovery.k8s.io/workload-update"] = strconv.FormatInt(w.nextOp.Add(1), 10)
		u.SetAnnotations(ann)
		out, err := res.Update(ctx, u, metav1.UpdateOptions{})
		if err != nil {
			obj.stale = true
			return err
		}
		obj.last = out
		return nil
	})
}

// removeLive takes obj out of the pool (w.mu held).
func (w *Workload) removeLive(kind string, obj *liveObject) {
	pool := w.live[kind]
	for i, o := range pool {
		if o == obj {
			w.live[kind] = append(pool[:i], pool[i+1:]...)
			return
		}
	}
}

// record keeps the operation's outcome (not when the workload ended while
// it ran: that is no outcome).
func (w *Workload) record(ctx context.Context, s Sample, err error) {
	s.Took = w.Since() - s.At
	s.Code = 200
	if err != nil {
		s.Code, s.Err = codeOf(err), truncate(err.Error(), 200)
		if ctx.Err() != nil {
			return
		}
	}
	w.mu.Lock()
	w.samples = append(w.samples, s)
	w.mu.Unlock()
	if w.cfg.OnSample != nil {
		w.cfg.OnSample(s)
	}
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
