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

package views

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// largeWatchEvent is the size of a watch event after which the decoder
// lets go of its buffer. client-go's watch decoding (a streaming decoder
// over encoding/json's) keeps two buffers the size of the largest event
// for the life of the watch: after one change of the merged discovery
// view (1.6 MB at 5,000 GVRs), 4.4–5.6 MiB of every filter's live heap
// until the watch times out, 5 to 10 minutes later (the bench's heap
// profiles, 2026-12-07). Events of the other kinds are a few KB.
const largeWatchEvent = 64 << 10

// newListWatch lists and watches resource (through client, selected by
// fieldSelector) as client-go's ListWatch does, with a watch whose
// decoder keeps no buffer of a large event once it is decoded.
func newListWatch(client rest.Interface, resource string, fieldSelector fields.Selector) *cache.ListWatch {
	lw := cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, fieldSelector)
	objects := codecs.WithoutConversion().DecoderToVersion(jsonSerializer(), nil)
	watchFunc := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.Watch = true
		o.FieldSelector = fieldSelector.String()
		body, err := client.Get().Resource(resource).VersionedParams(&o, metav1.ParameterCodec).Stream(ctx)
		if err != nil {
			return nil, err
		}
		// As rest.Request.Watch: a stream that cannot be decoded ends the
		// watch with an Error event of this reason.
		return watch.NewStreamWatcher(newEventDecoder(body, objects),
			apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
	}
	lw.WatchFuncWithContext = watchFunc
	lw.WatchFunc = func(o metav1.ListOptions) (watch.Interface, error) { return watchFunc(context.Background(), o) }
	return lw
}

// jsonSerializer is the codecs' JSON serializer (these types are JSON
// only: newRESTClient).
func jsonSerializer() runtime.Serializer {
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		panic("views: no JSON serializer in the scheme's codecs")
	}
	return info.Serializer
}

// eventDecoder reads a JSON watch stream (metav1.WatchEvent after
// metav1.WatchEvent) as client-go's rest/watch.Decoder does, and starts
// a fresh encoding/json.Decoder after each large event, keeping only
// what the old one had read ahead.
type eventDecoder struct {
	body    io.ReadCloser
	json    *json.Decoder
	objects runtime.Decoder
	// restarts counts the fresh decoders (tests).
	restarts int
}

func newEventDecoder(body io.ReadCloser, objects runtime.Decoder) *eventDecoder {
	return &eventDecoder{body: body, json: json.NewDecoder(body), objects: objects}
}

// Decode returns the next event; io.EOF at the stream's clean end.
func (d *eventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	start := d.json.InputOffset()
	var got metav1.WatchEvent
	if err := d.json.Decode(&got); err != nil {
		return "", nil, err
	}
	if d.json.InputOffset()-start > largeWatchEvent {
		ahead, err := io.ReadAll(d.json.Buffered())
		if err != nil {
			return "", nil, err
		}
		d.json = json.NewDecoder(io.MultiReader(bytes.NewReader(ahead), d.body))
		d.restarts++
	}
	switch t := watch.EventType(got.Type); t {
	case watch.Added, watch.Modified, watch.Deleted, watch.Error, watch.Bookmark:
		obj, err := runtime.Decode(d.objects, got.Object.Raw)
		if err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		return t, obj, nil
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", got.Type)
	}
}

func (d *eventDecoder) Close() { _ = d.body.Close() }
