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
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// discoveryEvent is a watch event of a PeerAggregatedDiscovery whose
// annotation carries padding bytes.
func discoveryEvent(typ, name string, padding int) string {
	return fmt.Sprintf(`{"type":%q,"object":{"kind":"PeerAggregatedDiscovery","apiVersion":"peerdiscovery.k8s.io/v1alpha1","metadata":{"name":%q,"resourceVersion":"2","annotations":{"padding":%q}}}}`+"\n",
		typ, name, strings.Repeat("x", padding))
}

// chunkReader returns at most n bytes per Read, so that events straddle
// the decoder's reads.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }
func (c chunkReader) Close() error               { return nil }

func TestWatchDecodingReadsEveryEventAcrossAFreshDecoder(t *testing.T) {
	stream := discoveryEvent("ADDED", "a", 10) +
		discoveryEvent("MODIFIED", "a", 3*largeWatchEvent) +
		discoveryEvent("MODIFIED", "a", 20) +
		`{"type":"BOOKMARK","object":{"kind":"PeerAggregatedDiscovery","apiVersion":"peerdiscovery.k8s.io/v1alpha1","metadata":{"resourceVersion":"3"}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}` + "\n" +
		discoveryEvent("DELETED", "a", 0)
	frames := newFrameDecoder(chunkReader{strings.NewReader(stream), 1000}, jsonSerializer())
	d := restclientwatch.NewDecoder(frames, codecs.WithoutConversion().DecoderToVersion(jsonSerializer(), nil))
	want := []struct {
		typ     watch.EventType
		padding int
	}{{watch.Added, 10}, {watch.Modified, 3 * largeWatchEvent}, {watch.Modified, 20}, {watch.Bookmark, -1}, {watch.Error, -1}, {watch.Deleted, 0}}
	for i, w := range want {
		typ, obj, err := d.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if typ != w.typ {
			t.Fatalf("event %d: type %s, want %s", i, typ, w.typ)
		}
		switch o := obj.(type) {
		case *v1alpha1.PeerAggregatedDiscovery:
			if w.padding >= 0 && (o.Name != "a" || len(o.Annotations["padding"]) != w.padding) {
				t.Fatalf("event %d: %q with %d bytes of padding, want \"a\" with %d", i, o.Name, len(o.Annotations["padding"]), w.padding)
			}
		case *metav1.Status:
			if typ != watch.Error || o.Code != 410 || o.Reason != metav1.StatusReasonExpired {
				t.Fatalf("event %d: %s with status %+v", i, typ, o)
			}
		default:
			t.Fatalf("event %d: object %T", i, obj)
		}
	}
	if _, _, err := d.Decode(); err != io.EOF {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
	if frames.restarts != 1 {
		t.Fatalf("%d fresh decoders, want 1 (after the one large event)", frames.restarts)
	}
}

func TestWatchDecodingRefusesWhatIsNoWatchEvent(t *testing.T) {
	objects := codecs.WithoutConversion().DecoderToVersion(jsonSerializer(), nil)
	for name, stream := range map[string]string{
		"unknown type": strings.Replace(discoveryEvent("ADDED", "a", 1), `"ADDED"`, `"RENAMED"`, 1),
		"unknown kind": `{"type":"ADDED","object":{"kind":"Secret","apiVersion":"v1","metadata":{"name":"a"}}}`,
		"cut short":    discoveryEvent("ADDED", "a", 100)[:80],
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := restclientwatch.NewDecoder(newFrameDecoder(io.NopCloser(strings.NewReader(stream)), jsonSerializer()), objects).Decode()
			if err == nil || err == io.EOF {
				t.Fatalf("decoded %q: err=%v, want an error", stream, err)
			}
			if name == "cut short" && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("a stream cut mid-event: %v, want io.ErrUnexpectedEOF (the watch ends without an Error event)", err)
			}
		})
	}
}

// An event over the bound ends the watch with an error after reading at
// most the bound, whatever the stream sends (client-go's streaming
// decoder stops at 16 MiB too); one under it, read before, is whole.
func TestWatchDecodingStopsAtTheEventBound(t *testing.T) {
	const max = 3 * largeWatchEvent
	stream := discoveryEvent("ADDED", "a", 2*largeWatchEvent) + discoveryEvent("MODIFIED", "a", 4*largeWatchEvent)
	frames := newFrameDecoder(chunkReader{strings.NewReader(stream), 1000}, jsonSerializer())
	frames.max = max
	d := restclientwatch.NewDecoder(frames, codecs.WithoutConversion().DecoderToVersion(jsonSerializer(), nil))
	if typ, obj, err := d.Decode(); err != nil || typ != watch.Added || len(obj.(*v1alpha1.PeerAggregatedDiscovery).Annotations["padding"]) != 2*largeWatchEvent {
		t.Fatalf("the event under the bound: %s, %v", typ, err)
	}
	_, _, err := d.Decode()
	if !errors.Is(err, errWatchEventTooLarge) {
		t.Fatalf("the event over the bound: %v, want errWatchEventTooLarge", err)
	}
	first := len(discoveryEvent("ADDED", "a", 2*largeWatchEvent))
	if frames.body.read > int64(first+max) {
		t.Fatalf("read %d bytes, want at most %d (the first event and the bound)", frames.body.read, first+max)
	}
}

// After a large event the filter's watch keeps no buffer of its size
// while it stays open: client-go's watch decoding kept two (the
// streaming decoder's and encoding/json's), 2× the event in all.
func TestWatchLetsGoOfALargeEventsBuffers(t *testing.T) {
	const size = 8 << 20
	big, small := []byte(discoveryEvent("ADDED", "merged", size)), []byte(discoveryEvent("MODIFIED", "merged", 10))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			http.Error(w, "watch only", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(big)
		_, _ = w.Write(small)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	client, err := newRESTClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	retained := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := retained()
	w, err := newListWatch(client, "peeraggregateddiscoveries", fields.Everything()).WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i, want := range []int{size, 10} {
		e := <-w.ResultChan()
		o, ok := e.Object.(*v1alpha1.PeerAggregatedDiscovery)
		if !ok || len(o.Annotations["padding"]) != want {
			t.Fatalf("event %d: %s %T, want the PeerAggregatedDiscovery with %d bytes of padding", i, e.Type, e.Object, want)
		}
	}
	after := retained()
	// Both events read and dropped, the watch open: what it holds now is
	// its buffers. client-go's decoding held 2 × 8 MiB here.
	if grown := int64(after) - int64(before); grown > size/4 {
		t.Fatalf("the open watch holds %d bytes after an event of %d, want under %d", grown, size, size/4)
	}
	// The server's copies were counted in before; they must not go
	// before after is read.
	runtime.KeepAlive(big)
	runtime.KeepAlive(small)
}
