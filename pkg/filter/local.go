package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/peerlease"
)

// acceptNoPeer asks for this server's own discovery only.
const acceptNoPeer = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer"

// maxLocalDiscoveryBytes bounds what is read from our own server.
const maxLocalDiscoveryBytes = 64 << 20

// localDoc is this server's own /api and /apis, as last read.
type localDoc struct {
	api, apis         []apidiscoveryv2.APIGroupDiscovery
	apiETag, apisETag string
	gvrs              map[schema.GroupVersionResource]struct{}
	generation        uint64
}

// localDiscovery caches this server's own (profile=nopeer) discovery, read
// over loopback: at start, periodically (ETag makes it a 304), and at once
// when a CRD or APIService changes, so a newly served API is served locally
// within a second.
type localDiscovery struct {
	doc     atomic.Pointer[localDoc]
	refresh chan struct{}
}

func newLocalDiscovery() *localDiscovery {
	return &localDiscovery{refresh: make(chan struct{}, 1)}
}

// Serves implements routing.Local; it does not allocate.
func (l *localDiscovery) Serves(gvr schema.GroupVersionResource) bool {
	d := l.doc.Load()
	if d == nil {
		return false
	}
	_, ok := d.gvrs[gvr]
	return ok
}

// served lists what this server serves itself, for its registration
// Lease when it departs; nil before the first read.
func (l *localDiscovery) served() []peerlease.ServedResource {
	d := l.doc.Load()
	if d == nil {
		return nil
	}
	return peerlease.ServedFromDiscovery(d.api, d.apis)
}

func (l *localDiscovery) synced() bool       { return l.doc.Load() != nil }
func (l *localDiscovery) current() *localDoc { return l.doc.Load() }

func (l *localDiscovery) poke() {
	select {
	case l.refresh <- struct{}{}:
	default:
	}
}

func (l *localDiscovery) start(ctx context.Context, loopback *rest.Config, interval time.Duration) error {
	client, err := rest.HTTPClientFor(loopback)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(loopback)
	if err != nil {
		return err
	}
	factory := metadatainformer.NewSharedInformerFactory(meta, 0)
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"},
	} {
		_, _ = factory.ForResource(gvr).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(interface{}) { l.poke() },
			UpdateFunc: func(interface{}, interface{}) { l.poke() },
			DeleteFunc: func(interface{}) { l.poke() },
		})
	}
	factory.Start(ctx.Done())
	base := loopback.Host
	if !strings.Contains(base, "://") {
		base = "https://" + base
	}
	host := strings.TrimSuffix(base, "/")
	// The first read is made before the post-start hook returns, so a ready
	// server knows what it serves itself (the filter's 503-or-local choice
	// while unsynced depends on it); bounded, so startup never waits long.
	firstCtx, cancel := context.WithTimeout(ctx, localFirstReadTimeout)
	defer cancel()
	if err := l.read(firstCtx, client, host); err != nil {
		klog.V(2).InfoS("peerdiscovery filter: first read of local discovery failed; will retry", "err", err)
		l.poke()
	}
	go l.loop(ctx, client, host, interval)
	return nil
}

const (
	// localFirstReadTimeout bounds the post-start hook's first read.
	localFirstReadTimeout = 5 * time.Second
	// localRereadDelay is when a change event's second read follows.
	localRereadDelay = time.Second
)

func (l *localDiscovery) loop(ctx context.Context, client *http.Client, host string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-again:
			again = nil
		case <-l.refresh:
			// A CRD or APIService changed: the local aggregated discovery
			// follows within moments; read now, and once more shortly after.
			again = time.After(localRereadDelay)
		}
		if err := l.read(ctx, client, host); err != nil && ctx.Err() == nil {
			klog.V(2).InfoS("peerdiscovery filter: reading local discovery failed; will retry", "err", err)
		}
	}
}

func (l *localDiscovery) read(ctx context.Context, client *http.Client, host string) error {
	prev := l.doc.Load()
	var prevAPI, prevAPIs string
	if prev != nil {
		prevAPI, prevAPIs = prev.apiETag, prev.apisETag
	}
	api, apiETag, apiSame, err := fetchLocal(ctx, client, host, "/api", prevAPI)
	if err != nil {
		return err
	}
	apis, apisETag, apisSame, err := fetchLocal(ctx, client, host, "/apis", prevAPIs)
	if err != nil {
		return err
	}
	if apiSame && apisSame {
		return nil
	}
	if apiSame {
		api = prev.api
	}
	if apisSame {
		apis = prev.apis
	}
	l.doc.Store(newLocalDoc(prev, api, apis, apiETag, apisETag))
	return nil
}

// newLocalDoc indexes the served GVRs of api and apis; its generation
// follows prev's.
func newLocalDoc(prev *localDoc, api, apis []apidiscoveryv2.APIGroupDiscovery, apiETag, apisETag string) *localDoc {
	d := &localDoc{api: api, apis: apis, apiETag: apiETag, apisETag: apisETag, gvrs: map[schema.GroupVersionResource]struct{}{}}
	if prev != nil {
		d.generation = prev.generation + 1
	}
	for _, doc := range [][]apidiscoveryv2.APIGroupDiscovery{api, apis} {
		for _, g := range doc {
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					d.gvrs[schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}] = struct{}{}
				}
			}
		}
	}
	return d
}

func fetchLocal(ctx context.Context, client *http.Client, host, path, etag string) ([]apidiscoveryv2.APIGroupDiscovery, string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+path, nil)
	if err != nil {
		return nil, "", false, err
	}
	req.Header.Set("Accept", acceptNoPeer)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotModified {
		return nil, etag, true, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", false, fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLocalDiscoveryBytes))
	if err != nil {
		return nil, "", false, err
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, "", false, fmt.Errorf("GET %s: %w", path, err)
	}
	return list.Items, resp.Header.Get("ETag"), false, nil
}
