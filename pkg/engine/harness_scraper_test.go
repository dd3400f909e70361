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

package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"
)

// ---- the scripted scraper ----

type scrapeCall struct {
	endpoint, apiETag, apisETag string
	deadline                    time.Time
	hasDeadline                 bool
}

type behavior func(ctx context.Context, apiETag, apisETag string) (Document, error)

// fakeScraper answers per endpoint from a script; safe for concurrent use.
type fakeScraper struct {
	mu     sync.Mutex
	script map[string]behavior
	calls  []scrapeCall
	// reads are the full reads and heartbeats, in the order they started.
	reads []read
}

type read struct{ kind, endpoint string } // kind: "scrape" or "beat"

func newFakeScraper() *fakeScraper { return &fakeScraper{script: map[string]behavior{}} }

func (f *fakeScraper) set(endpoint string, b behavior) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[endpoint] = b
}

func (f *fakeScraper) Scrape(ctx context.Context, endpoint string, prev *nopeer.Documents) (Document, error) {
	var apiETag, apisETag string
	if prev != nil {
		apiETag, apisETag = prev.APIETag, prev.APIsETag
	}
	dl, ok := ctx.Deadline()
	f.mu.Lock()
	b := f.script[endpoint]
	f.calls = append(f.calls, scrapeCall{endpoint: endpoint, apiETag: apiETag, apisETag: apisETag, deadline: dl, hasDeadline: ok})
	f.reads = append(f.reads, read{"scrape", endpoint})
	f.mu.Unlock()
	if b == nil {
		return Document{}, &nopeer.ReadError{Type: nopeer.ErrRefused, Path: "/api", Err: errors.New("connect: connection refused (unscripted endpoint)")}
	}
	return b(ctx, apiETag, apisETag)
}

// Heartbeat answers from the same script: the version of what a read would
// get, or its error.
func (f *fakeScraper) Heartbeat(ctx context.Context, endpoint string) (string, error) {
	f.mu.Lock()
	b := f.script[endpoint]
	f.reads = append(f.reads, read{"beat", endpoint})
	f.mu.Unlock()
	if b == nil {
		return "", &nopeer.ReadError{Type: nopeer.ErrRefused, Path: "/version", Err: errors.New("connect: connection refused (unscripted endpoint)")}
	}
	doc, err := b(ctx, "", "")
	return doc.Version, err
}

func (f *fakeScraper) beatsTo(endpoint string) int {
	return len(slices.DeleteFunc(f.readsTo(endpoint), func(kind string) bool { return kind != "beat" }))
}

// readsTo returns the kinds ("scrape" or "beat") of the reads of
// endpoint, in the order they started.
func (f *fakeScraper) readsTo(endpoint string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.reads {
		if r.endpoint == endpoint {
			out = append(out, r.kind)
		}
	}
	return out
}

func (f *fakeScraper) callsTo(endpoint string) []scrapeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []scrapeCall
	for _, c := range f.calls {
		if c.endpoint == endpoint {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeScraper) endpoints() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if !slices.Contains(out, c.endpoint) {
			out = append(out, c.endpoint)
		}
	}
	return out
}

// serve answers doc, or NotModified when both ETags match, like a real
// server's 304s.
func serve(doc Document) behavior {
	return func(_ context.Context, apiETag, apisETag string) (Document, error) {
		if apiETag == doc.APIETag && apisETag == doc.APIsETag {
			return Document{APIETag: doc.APIETag, APIsETag: doc.APIsETag, Version: doc.Version, NotModified: true}, nil
		}
		return doc, nil
	}
}

func fail(typ nopeer.ErrorType) behavior {
	return func(context.Context, string, string) (Document, error) {
		return Document{}, &nopeer.ReadError{Type: typ, Path: "/apis", Err: fmt.Errorf("scripted %s", typ)}
	}
}

// hang blocks until the scrape's context ends, counting outstanding hangs,
// and fails as the real scraper does.
func hang(outstanding *sync.WaitGroup, count *int32Counter) behavior {
	return func(ctx context.Context, _, _ string) (Document, error) {
		count.add(1)
		if outstanding != nil {
			outstanding.Add(1)
			defer outstanding.Done()
		}
		<-ctx.Done()
		count.add(-1)
		return Document{}, &nopeer.ReadError{Type: nopeer.ErrTimeout, Path: "/api", Err: ctx.Err()}
	}
}

// gated blocks until release is closed, then answers doc.
func gated(release <-chan struct{}, started chan<- struct{}, doc Document) behavior {
	var once sync.Once
	return func(ctx context.Context, _, _ string) (Document, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
			return doc, nil
		case <-ctx.Done():
			return Document{}, &nopeer.ReadError{Type: nopeer.ErrTimeout, Path: "/api", Err: ctx.Err()}
		}
	}
}

type int32Counter struct {
	mu sync.Mutex
	n  int32
}

func (c *int32Counter) add(d int32) {
	c.mu.Lock()
	c.n += d
	c.mu.Unlock()
}

func (c *int32Counter) get() int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
