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
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// NamespaceRecord is one short-lived namespace: created, filled by the
// workload's creates, deleted. The kube-controller-manager's namespace
// controller then deletes what is in it, from what its server's
// discovery lists.
type NamespaceRecord struct {
	Name    string        `json:"name"`
	Created time.Duration `json:"created"`
	// DeleteAcked: the DELETE of the namespace got 200 at Deleted.
	DeleteAcked bool          `json:"deleteAcked"`
	Deleted     time.Duration `json:"deleted,omitempty"`
}

// namespaceLifecycle creates a namespace every NamespaceEvery, lets the
// workload create objects in it for NamespaceLife, then deletes it.
func (w *Workload) namespaceLifecycle(ctx context.Context) {
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.NamespaceEvery):
		}
		name := fmt.Sprintf("%s-%s-%d", w.cfg.Namespace, w.cfg.Run, n)
		if !w.createNamespace(ctx, name) {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.NamespaceLife):
		}
		w.deleteNamespace(ctx, name)
	}
}

// namespaceOp sends one namespace write, with the write gate held (a
// paused workload waits here), recorded as an operation.
func (w *Workload) namespaceOp(ctx context.Context, verb string, f func(dynamic.ResourceInterface) error) error {
	w.writes.RLock()
	defer w.writes.RUnlock()
	server := w.server()
	s := Sample{At: w.Since(), Phase: int(w.phase.Load()), Server: server, Kind: "namespaces", Verb: verb}
	err := f(w.clients[server].Resource(NamespacesGVR))
	w.record(ctx, s, err)
	return err
}

// createNamespace creates it (a few tries: a fault may be on) and opens
// it to creates.
func (w *Workload) createNamespace(ctx context.Context, name string) bool {
	rec := &NamespaceRecord{Name: name, Created: w.Since()}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": map[string]any{RunLabel: w.cfg.Run}}}}
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		err := w.namespaceOp(ctx, "create", func(r dynamic.ResourceInterface) error {
			_, err := r.Create(ctx, ns, metav1.CreateOptions{})
			return err
		})
		if err == nil || apierrors.IsAlreadyExists(err) {
			w.mu.Lock()
			w.namespaces = append(w.namespaces, &namespace{name: name})
			w.nsRecords = append(w.nsRecords, rec)
			w.mu.Unlock()
			return true
		}
		time.Sleep(time.Second)
	}
	return false
}

// deleteNamespace closes it to creates, waits for the creates in flight,
// retires its live objects (the namespace deletion takes them), and
// deletes it (a few tries).
func (w *Workload) deleteNamespace(ctx context.Context, name string) {
	w.mu.Lock()
	var ns *namespace
	for _, n := range w.namespaces {
		if n.name == name {
			ns = n
		}
	}
	ns.terminating = true
	var rec *NamespaceRecord
	for _, r := range w.nsRecords {
		if r.Name == name {
			rec = r
		}
	}
	w.mu.Unlock()
	// After the last create into it is done, nothing adds to its objects.
	ns.creates.Wait()
	w.mu.Lock()
	var retired []*liveObject
	for kind, pool := range w.live {
		for _, o := range pool {
			if o.rec.Namespace == name {
				retired = append(retired, o)
			}
		}
		w.live[kind] = slices.DeleteFunc(pool, func(o *liveObject) bool { return o.rec.Namespace == name })
	}
	for _, c := range w.creates {
		if c.Namespace == name {
			c.NamespaceDeleted = true
		}
	}
	w.mu.Unlock()
	for _, o := range retired {
		o.mu.Lock() // waits for the operation on it, if any
		o.gone = true
		o.mu.Unlock()
	}
	for try := 0; try < 10 && ctx.Err() == nil; try++ {
		err := w.namespaceOp(ctx, "delete", func(r dynamic.ResourceInterface) error {
			return r.Delete(ctx, name, metav1.DeleteOptions{})
		})
		if err == nil {
			w.mu.Lock()
			rec.DeleteAcked, rec.Deleted = true, w.Since()
			w.mu.Unlock()
			return
		}
		time.Sleep(time.Second)
	}
}

// NamespaceCheck is what one deleted namespace left behind.
type NamespaceCheck struct {
	Name    string        `json:"name"`
	Deleted time.Duration `json:"deleted"`
	// Gone: the namespace no longer exists (after GoneAfter from its
	// delete); else it was still there (Terminating) when the check gave
	// up.
	Gone      bool          `json:"gone"`
	GoneAfter time.Duration `json:"goneAfter,omitempty"`
	// Left are the objects found in it after it was gone (kind/name).
	Left []string `json:"left,omitempty"`
	// Err is why its objects could not be listed.
	Err string `json:"err,omitempty"`
}

// CheckNamespaces waits, until ctx ends, for each deleted namespace to be
// gone, then lists every namespaced kind in it with clientFor(kind) (a
// client of a server that serves it): a namespace must take its objects
// with it.
func CheckNamespaces(ctx context.Context, records []*NamespaceRecord, kinds []Kind, clientFor func(Kind) dynamic.Interface, since func() time.Duration) []NamespaceCheck {
	var out []NamespaceCheck
	for _, r := range records {
		if !r.DeleteAcked {
			continue
		}
		nc := NamespaceCheck{Name: r.Name, Deleted: r.Deleted}
		nsClient := clientFor(Kind{Name: "namespaces", GVR: NamespacesGVR})
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := nsClient.Resource(NamespacesGVR).Get(ctx, r.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if ctx.Err() != nil {
			out = append(out, nc)
			continue
		}
		nc.Gone, nc.GoneAfter = true, since()-r.Deleted
		for _, k := range kinds {
			if !k.Namespaced {
				continue
			}
			var list *unstructured.UnstructuredList
			err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
				var err error
				list, err = clientFor(k).Resource(k.GVR).Namespace(r.Name).List(ctx, metav1.ListOptions{})
				return err == nil, nil
			})
			if err != nil {
				nc.Err = fmt.Sprintf("listing %s: %v", k.Name, err)
				continue
			}
			for _, it := range list.Items {
				nc.Left = append(nc.Left, k.Name+"/"+it.GetName())
			}
		}
		out = append(out, nc)
	}
	return out
}
