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
	"errors"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
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

// maxWatchEvent bounds one event, as client-go's streaming decoder does
// (16 MiB): a larger one ends the watch with an error, and the informer
// lists again, instead of taking whatever memory the stream asks.
const maxWatchEvent = 16 << 20

// newListWatch lists and watches resource (through client, selected by
// fieldSelector) as client-go's ListWatch does, with a watch whose frame
// decoder keeps no buffer of a large event once it is decoded; the events
// themselves are read by client-go's rest/watch.Decoder.
func newListWatch(client rest.Interface, resource string, fieldSelector fields.Selector) *cache.ListWatch {
	lw := cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, fieldSelector)
	serializer := jsonSerializer()
	objects := codecs.WithoutConversion().DecoderToVersion(serializer, nil)
	watchFunc := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.Watch = true
		o.FieldSelector = fieldSelector.String()
		body, err := client.Get().Resource(resource).VersionedParams(&o, metav1.ParameterCodec).Stream(ctx)
		if err != nil {
			return nil, err
		}
		// As rest.Request.Watch: a stream that cannot be decoded ends the
		// watch with an Error event of this reason.
		return watch.NewStreamWatcher(restclientwatch.NewDecoder(newFrameDecoder(body, serializer), objects),
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

// frameDecoder is a streaming.Decoder of a JSON watch stream, one
// metav1.WatchEvent after another, as apimachinery's streaming decoder
// over its JSON framer is, but it starts a fresh encoding/json.Decoder
// after each large event, keeping only what the old one had read ahead.
type frameDecoder struct {
	body       *boundedReader
	json       *json.Decoder
	serializer runtime.Decoder
	// start is where in body the current json decoder's input begins
	// (what the last one had read ahead comes first).
	start int64
	// max bounds one frame (maxWatchEvent; tests set less).
	max int64
	// restarts counts the fresh decoders (tests).
	restarts int
}

func newFrameDecoder(body io.ReadCloser, serializer runtime.Decoder) *frameDecoder {
	b := &boundedReader{r: body}
	return &frameDecoder{body: b, json: json.NewDecoder(b), serializer: serializer, max: maxWatchEvent}
}

// Decode decodes the next frame into into; io.EOF at the stream's clean
// end, io.ErrUnexpectedEOF when it ends mid-frame, errWatchEventTooLarge
// past max bytes.
func (d *frameDecoder) Decode(defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	d.body.limit = d.start + d.json.InputOffset() + d.max
	var frame json.RawMessage
	if err := d.json.Decode(&frame); err != nil {
		if errors.Is(err, errWatchEventTooLarge) {
			err = fmt.Errorf("%w: over %d bytes", err, d.max)
		}
		return nil, nil, err
	}
	if len(frame) > largeWatchEvent {
		ahead, err := io.ReadAll(d.json.Buffered())
		if err != nil {
			return nil, nil, err
		}
		d.start = d.body.read - int64(len(ahead))
		d.json = json.NewDecoder(io.MultiReader(bytes.NewReader(ahead), d.body))
		d.restarts++
	}
	return d.serializer.Decode(frame, defaults, into)
}

func (d *frameDecoder) Close() error { return d.body.r.Close() }

var errWatchEventTooLarge = errors.New("watch event too large")

// boundedReader reads r up to limit bytes from its start.
type boundedReader struct {
	r           io.ReadCloser
	read, limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.read >= b.limit {
		return 0, errWatchEventTooLarge
	}
	n, err := b.r.Read(p[:min(int64(len(p)), b.limit-b.read)])
	b.read += int64(n)
	return n, err
}
