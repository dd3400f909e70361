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
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"sigs.k8s.io/peerdiscovery/pkg/registry/memstore"
)

// Path is the leader's replication stream.
const Path = "/internal/peerdiscovery/replication"

// frame is one line of the stream; exactly one field is set.
type frame struct {
	Snapshot *wireSnapshot `json:"snapshot,omitempty"`
	Resume   *wireResume   `json:"resume,omitempty"`
	Batch    *wireBatch    `json:"batch,omitempty"`
	Progress *wireProgress `json:"progress,omitempty"`
}

type wireSnapshot struct {
	Timeline memstore.Timeline `json:"timeline"`
	Stores   []wireStore       `json:"stores"`
}

// wireResume continues a follower from the resourceVersion it asked with.
type wireResume struct {
	Timeline memstore.Timeline `json:"timeline"`
	Replay   []wireBatch       `json:"replay"`
}

type wireStore struct {
	Resource string            `json:"resource"`
	LastRV   uint64            `json:"lastRV,string"`
	Items    []json.RawMessage `json:"items"`
}

type wireBatch struct {
	Resource string       `json:"resource"`
	Changes  []wireChange `json:"changes"`
}

type wireChange struct {
	Type   watch.EventType `json:"type"`
	RV     uint64          `json:"rv,string"`
	Name   string          `json:"name"`
	Object json.RawMessage `json:"object,omitempty"`
}

type wireProgress struct {
	Current uint64 `json:"current,string"`
}

// The objects are the stores' internal types, whose fields carry the same
// JSON names as v1alpha1: both ends run the same build (replicas of one
// Deployment; a rollout mixes two builds only briefly, and a follower that
// cannot decode a frame reconnects, then serves its last state until it is
// stale).

func encodeSnapshot(s memstore.Snapshot) (*wireSnapshot, error) {
	out := &wireSnapshot{Timeline: s.Timeline}
	for _, ss := range s.Stores {
		ws := wireStore{Resource: ss.Resource, LastRV: ss.LastRV, Items: make([]json.RawMessage, len(ss.Items))}
		for i, o := range ss.Items {
			raw, err := json.Marshal(o)
			if err != nil {
				return nil, fmt.Errorf("encoding %s: %w", ss.Resource, err)
			}
			ws.Items[i] = raw
		}
		out.Stores = append(out.Stores, ws)
	}
	return out, nil
}

func encodeStart(s memstore.Start) (frame, error) {
	if s.Snapshot != nil {
		ws, err := encodeSnapshot(*s.Snapshot)
		return frame{Snapshot: ws}, err
	}
	r := &wireResume{Timeline: s.Timeline, Replay: make([]wireBatch, len(s.Replay))}
	for i, b := range s.Replay {
		wb, err := encodeBatch(b)
		if err != nil {
			return frame{}, err
		}
		r.Replay[i] = *wb
	}
	return frame{Resume: r}, nil
}

func encodeBatch(b memstore.Batch) (*wireBatch, error) {
	out := &wireBatch{Resource: b.Resource, Changes: make([]wireChange, len(b.Changes))}
	for i, ch := range b.Changes {
		wc := wireChange{Type: ch.Type, RV: ch.RV, Name: ch.Name}
		if ch.Object != nil {
			raw, err := json.Marshal(ch.Object)
			if err != nil {
				return nil, fmt.Errorf("encoding %s %q: %w", b.Resource, ch.Name, err)
			}
			wc.Object = raw
		}
		out.Changes[i] = wc
	}
	return out, nil
}

// newObjectFunc returns an empty object of a store's type.
type newObjectFunc func(resource string) (runtime.Object, error)

func decodeObject(newObj newObjectFunc, resource string, raw json.RawMessage) (runtime.Object, error) {
	obj, err := newObj(resource)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decoding a %s object: %w", resource, err)
	}
	return obj, nil
}

func decodeSnapshot(newObj newObjectFunc, w *wireSnapshot) (memstore.Snapshot, error) {
	out := memstore.Snapshot{Timeline: w.Timeline}
	for _, ws := range w.Stores {
		ss := memstore.StoreSnapshot{Resource: ws.Resource, LastRV: ws.LastRV, Items: make([]runtime.Object, len(ws.Items))}
		for i, raw := range ws.Items {
			obj, err := decodeObject(newObj, ws.Resource, raw)
			if err != nil {
				return memstore.Snapshot{}, err
			}
			ss.Items[i] = obj
		}
		out.Stores = append(out.Stores, ss)
	}
	return out, nil
}

func decodeReplay(newObj newObjectFunc, w *wireResume) ([]memstore.Batch, error) {
	out := make([]memstore.Batch, len(w.Replay))
	for i := range w.Replay {
		b, err := decodeBatch(newObj, &w.Replay[i])
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func decodeBatch(newObj newObjectFunc, w *wireBatch) (memstore.Batch, error) {
	out := memstore.Batch{Resource: w.Resource, Changes: make([]memstore.Change, len(w.Changes))}
	for i, wc := range w.Changes {
		ch := memstore.Change{Type: wc.Type, RV: wc.RV, Name: wc.Name}
		if len(wc.Object) > 0 {
			obj, err := decodeObject(newObj, w.Resource, wc.Object)
			if err != nil {
				return memstore.Batch{}, err
			}
			ch.Object = obj
		}
		out.Changes[i] = ch
	}
	return out, nil
}
