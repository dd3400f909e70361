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

package discovery

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
	"sigs.k8s.io/peerdiscovery/pkg/filter/metrics"
	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
	"sigs.k8s.io/peerdiscovery/pkg/filter/status"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

// OpenAPI v3 is per group-version: /openapi/v3 lists the group-versions
// with a serverRelativeURL carrying the document's hash, and
// /openapi/v3/apis/<group>/<version>?hash=<hash> serves it (immutable, so
// clients cache it by URL). For a group-version that a peer serves more of
// than this server (DecideGroupVersion), the root lists the peer's entry,
// hash included, and the document request goes to that peer, so the hash a
// client was given is the one the document comes with.

const (
	openAPIRoot   = "/openapi/v3"
	openAPIPrefix = "/openapi/v3/"
	// peerRootTTL bounds how long a peer's /openapi/v3 is reused. A
	// changed spec keeps its group-version's discovery, so the merged
	// discovery version alone does not notice; a stale hash costs a
	// redirect to the current one, never a wrong document.
	peerRootTTL = 30 * time.Second
	// maxOpenAPIRootBytes bounds a root document read from a peer or the
	// local chain (a few KiB per hundred group-versions).
	maxOpenAPIRootBytes = 4 << 20
)

// openAPIRootDoc is the /openapi/v3 document.
type openAPIRootDoc struct {
	Paths map[string]json.RawMessage `json:"paths"`
}

// openAPIKey is a group-version's key in the root document.
func openAPIKey(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// parseOpenAPIPath returns the group-version of /openapi/v3/api/v1 or
// /openapi/v3/apis/<group>/<version>.
func parseOpenAPIPath(path string) (schema.GroupVersion, bool) {
	rest, ok := strings.CutPrefix(path, openAPIPrefix)
	if !ok {
		return schema.GroupVersion{}, false
	}
	if rest == "api/v1" {
		return schema.GroupVersion{Version: "v1"}, true
	}
	p, ok := parseDiscoveryPath("/" + rest)
	if !ok || p.core || p.version == "" {
		return schema.GroupVersion{}, false
	}
	return p.groupVersion(), true
}

// peerOpenAPIRoots caches peers' /openapi/v3 documents.
type peerOpenAPIRoots struct {
	mu    sync.Mutex
	roots map[string]cachedRoot // by peer ID
}

type cachedRoot struct {
	endpoint string
	merged   string // the merged discovery's resourceVersion when read
	at       time.Time
	doc      openAPIRootDoc
}

// openAPIChoice is, for one group-version, the peer whose OpenAPI document
// clients get: the first candidate of DecideGroupVersion, or for a split
// group-version the peer serving most of it when it serves more than this
// server.
func openAPIChoice(res routing.GroupVersionResult) (routing.Peer, bool) {
	if res.Decision != v1alpha1.RouteProxy || len(res.Candidates) == 0 {
		return routing.Peer{}, false
	}
	if res.Split && res.PeerServes <= res.LocalServes {
		return routing.Peer{}, false
	}
	return res.Candidates[0], true
}

// serveOpenAPIRoot answers /openapi/v3 with this server's root document in
// which the group-versions a peer serves more of name the peer's document.
// It returns false when no group-version needs a peer (the chain answers).
func (d *Server) serveOpenAPIRoot(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	snap, now := d.views.Snapshot(), d.now()
	chosen := map[string]routing.Peer{} // root key -> peer
	for _, gv := range snap.Table.GroupVersions() {
		if p, ok := openAPIChoice(routing.DecideGroupVersion(snap, gv, now)); ok {
			chosen[openAPIKey(gv)] = p
		}
	}
	if len(chosen) == 0 {
		return false
	}
	local := newBufferWriter(maxOpenAPIRootBytes)
	sub := r.Clone(r.Context())
	sub.Header.Del("If-None-Match")
	sub.Header.Del("If-Modified-Since")
	next.ServeHTTP(local, sub)
	var doc openAPIRootDoc
	if local.code != http.StatusOK || local.overflow || json.Unmarshal(local.buf.Bytes(), &doc) != nil || doc.Paths == nil {
		// Whatever the chain said (an error, a 403) is the answer.
		local.replay(w)
		return true
	}
	merged := d.views.Routes.Current().Merged
	mergedRV := ""
	if merged != nil {
		mergedRV = merged.ResourceVersion
	}
	for key, peer := range chosen {
		root, ok := d.peerOpenAPIRoot(r, peer, mergedRV)
		if !ok {
			continue
		}
		if entry, ok := root.Paths[key]; ok {
			doc.Paths[key] = entry
		}
	}
	body, err := json.Marshal(doc)
	if err != nil {
		local.replay(w)
		return true
	}
	w.Header().Set("Etag", strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(body))))
	w.Header().Set("Content-Type", "application/json")
	// ServeContent answers If-None-Match with 304.
	http.ServeContent(w, r, openAPIRoot, time.Time{}, bytes.NewReader(body))
	return true
}

// peerOpenAPIRoot returns peer's /openapi/v3, read on behalf of the
// requesting user (the same identity as any proxied request) and kept for
// peerRootTTL while the merged discovery stays the same.
func (d *Server) peerOpenAPIRoot(r *http.Request, peer routing.Peer, mergedRV string) (openAPIRootDoc, bool) {
	c := &d.openAPIRoots
	c.mu.Lock()
	cached, ok := c.roots[peer.ID]
	c.mu.Unlock()
	if ok && cached.endpoint == peer.Endpoint && cached.merged == mergedRV && d.now().Sub(cached.at) < peerRootTTL {
		return cached.doc, true
	}
	sub := r.Clone(r.Context())
	sub.URL.Path, sub.URL.RawPath, sub.URL.RawQuery = openAPIRoot, "", ""
	sub.Header.Del("If-None-Match")
	sub.Header.Del("If-Modified-Since")
	sub.Header.Set("Accept", "application/json")
	out := newBufferWriter(maxOpenAPIRootBytes)
	d.proxy.Serve(out, sub, proxy.Target{Candidates: []routing.Peer{peer}, About: status.OpenAPIRootSubject})
	var doc openAPIRootDoc
	if out.code != http.StatusOK || out.overflow || json.Unmarshal(out.buf.Bytes(), &doc) != nil {
		klog.FromContext(r.Context()).V(2).Info("peerdiscovery filter: reading a peer's /openapi/v3 failed; its group-versions keep this server's entries", "peer", peer.ID, "code", out.code)
		return openAPIRootDoc{}, false
	}
	c.put(peer.ID, cachedRoot{endpoint: peer.Endpoint, merged: mergedRV, at: d.now(), doc: doc})
	return doc, true
}

// put stores a peer's root and drops every entry past peerRootTTL: peers
// get a new ID on each restart, so the cache is bounded by time, not by
// the IDs it has seen.
func (c *peerOpenAPIRoots) put(id string, r cachedRoot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roots == nil {
		c.roots = map[string]cachedRoot{}
	}
	for k, old := range c.roots {
		if r.at.Sub(old.at) >= peerRootTTL {
			delete(c.roots, k)
		}
	}
	c.roots[id] = r
}

// serveOpenAPIGroupVersion sends /openapi/v3/apis/<group>/<version> to the
// peer the root names for it. It returns false for the chain.
func (d *Server) serveOpenAPIGroupVersion(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion) bool {
	snap := d.views.Snapshot()
	res := routing.DecideGroupVersion(snap, gv, d.now())
	if res.Decision == v1alpha1.RouteUnavailable {
		metrics.DiscoveryServed(metrics.EndpointOpenAPIGroupVersion, metrics.SourceUnavailable)
		d.groupVersionUnavailable(w, r, res)
		return true
	}
	peer, ok := openAPIChoice(res)
	if !ok {
		return false
	}
	metrics.DiscoveryServed(metrics.EndpointOpenAPIGroupVersion, metrics.SourcePeer)
	// The chosen peer first, then the others serving all of it: a hash
	// that is not theirs gets their redirect to their own.
	cands := append([]routing.Peer{peer}, res.Candidates[1:]...)
	if res.Split {
		cands = cands[:1]
	}
	d.proxy.Serve(w, r, proxy.Target{Candidates: cands, About: status.GroupVersionSubject(gv), Decided: snap})
	return true
}

// bufferWriter records a response of at most max bytes.
type bufferWriter struct {
	header   http.Header
	code     int
	buf      bytes.Buffer
	max      int
	overflow bool
}

func newBufferWriter(max int) *bufferWriter {
	return &bufferWriter{header: http.Header{}, max: max}
}

func (b *bufferWriter) Header() http.Header { return b.header }

func (b *bufferWriter) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	if b.buf.Len()+len(p) > b.max {
		b.overflow = true
		return 0, fmt.Errorf("response larger than %d bytes", b.max)
	}
	return b.buf.Write(p)
}

// replay writes the recorded response to w.
func (b *bufferWriter) replay(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	code := b.code
	if code == 0 {
		code = http.StatusOK
	}
	if b.overflow {
		code = http.StatusInternalServerError
	}
	w.WriteHeader(code)
	if !b.overflow {
		_, _ = w.Write(b.buf.Bytes())
	}
}
