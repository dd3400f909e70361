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

package memstore

import (
	"bytes"
	"io"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// cachedObject is what watchers receive: a stored object that caches its
// encodings, one per encoder identifier, so an event sent to a thousand
// watchers is converted and serialized once per content type. The
// apiserver's watch and versioning encoders recognise runtime.CacheableObject.
// It mirrors the watch cache's cachingObject (k8s.io/apiserver's cacher),
// which is unexported.
//
// The wrapped object is shared and never modified: encoders receive a
// private copy (GetObject), since encoding sets the kind on what it encodes.
type cachedObject struct {
	obj runtime.Object

	mu  sync.Mutex
	enc map[runtime.Identifier]*encoding
}

type encoding struct {
	once sync.Once
	raw  []byte
	err  error
}

var (
	_ runtime.CacheableObject   = &cachedObject{}
	_ metav1.ObjectMetaAccessor = &cachedObject{}
)

func newCachedObject(obj runtime.Object) *cachedObject { return &cachedObject{obj: obj} }

// CacheEncode writes the encoding for id, computing it on first use.
func (o *cachedObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	o.mu.Lock()
	if o.enc == nil {
		o.enc = map[runtime.Identifier]*encoding{}
	}
	e := o.enc[id]
	if e == nil {
		e = &encoding{}
		o.enc[id] = e
	}
	o.mu.Unlock()
	e.once.Do(func() {
		var buf bytes.Buffer
		e.err = encode(o.GetObject(), &buf)
		e.raw = buf.Bytes()
	})
	if e.err != nil {
		return e.err
	}
	if s, ok := w.(runtime.Splice); ok {
		s.Splice(e.raw)
		return nil
	}
	_, err := w.Write(e.raw)
	return err
}

// GetObject returns a copy the caller owns.
func (o *cachedObject) GetObject() runtime.Object { return o.obj.DeepCopyObject() }

// GetObjectKind ignores writes: the stored objects carry no kind, and a
// caller setting one must not touch the shared object.
func (o *cachedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetObjectMeta returns a copy of the object's metadata, so meta.Accessor
// works on events without copying a large object; writes to it are lost.
func (o *cachedObject) GetObjectMeta() metav1.Object {
	if a, ok := o.obj.(metav1.ObjectMetaAccessor); ok {
		if om, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return om.DeepCopy()
		}
	}
	m, err := meta.Accessor(o.obj)
	if err != nil {
		return nil
	}
	return &metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion(), Generation: m.GetGeneration(), CreationTimestamp: m.GetCreationTimestamp(),
		Labels: maps.Clone(m.GetLabels()), Annotations: maps.Clone(m.GetAnnotations())}
}

// DeepCopyObject copies the object; the encodings are not carried over.
func (o *cachedObject) DeepCopyObject() runtime.Object {
	return newCachedObject(o.obj.DeepCopyObject())
}

// Unwrap returns the object a watch event carries: events from a Store
// hold a runtime.CacheableObject, whose GetObject is a copy the caller owns.
func Unwrap(obj runtime.Object) runtime.Object {
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.GetObject()
	}
	return obj
}
