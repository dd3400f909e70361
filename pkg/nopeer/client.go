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

// Package nopeer reads one kube-apiserver's own discovery (profile=nopeer)
// and its version, bounded in size, checked for its media type and validated
// with merge.Validate, and classifies what goes wrong. The peer engine reads
// every peer with it, and the filter its own server over loopback.
package nopeer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"golang.org/x/sync/semaphore"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/version"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

// Accept asks a kube-apiserver for its own (non-peer-aggregated)
// discovery. Servers that ignore the profile answer the same document type.
const Accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer"

// DefaultPeerServerName is the name kube-apiservers' serving certificates
// carry for in-cluster clients: what the peer engine and the filter verify
// in peers' certificates unless told otherwise.
const DefaultPeerServerName = "kubernetes.default.svc"

// decodeFactor is the memory a JSON discovery document takes while it is
// decoded, per byte of document: measured at about 3 for a 5,000-GVR
// document (1.7 MB), with room for less regular ones.
const decodeFactor = 8

// Client reads a kube-apiserver's own discovery (profile=nopeer)
// and its version: the one GET that the peer engine makes of every peer
// and the filter makes of its own server over loopback.
type Client struct {
	client   *http.Client
	maxBytes int64
	// decode bounds the memory of documents being decoded at once:
	// decodeFactor × their size, up to decodeFactor × maxBytes in all, so a
	// burst of large documents decodes one after another instead of all
	// at once. Each document takes its whole share at once: no deadlock.
	decode *semaphore.Weighted
}

// NewClient reads through client (which carries the credentials and
// the TLS configuration) documents of at most maxBytes. Redirects are
// refused, never followed: they could lead the credentials anywhere.
func NewClient(client *http.Client, maxBytes int64) *Client {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{client: &c, maxBytes: maxBytes, decode: semaphore.NewWeighted(maxBytes * decodeFactor)}
}

// Document is one /api or /apis document as read.
type Document struct {
	Items []apidiscoveryv2.APIGroupDiscovery
	// ETag is the server's, or a hash of Items when it sent none.
	ETag string
	// NotModified: the server answered 304 to the ETag asked with; Items
	// is then empty and ETag that ETag.
	NotModified bool
}

// Discovery GETs base+path (path is /api or /apis; base is
// scheme://host[:port]) with the nopeer Accept and If-None-Match etag, and
// returns the document only when it is aggregated discovery that passes
// merge.Validate. Every failure is a *ReadError.
func (c *Client) Discovery(ctx context.Context, base, path, etag string) (Document, error) {
	resp, body, err := c.get(ctx, base, path, Accept, etag)
	if err != nil {
		return Document{}, err
	}
	if resp.StatusCode == http.StatusNotModified {
		return Document{ETag: etag, NotModified: true}, nil
	}
	if err := checkMediaType(resp.Header.Get("Content-Type")); err != nil {
		return Document{}, &ReadError{Type: ErrMediaType, Path: path, Err: err}
	}
	weight := min(int64(len(body))*decodeFactor, c.maxBytes*decodeFactor)
	if err := c.decode.Acquire(ctx, weight); err != nil {
		return Document{}, &ReadError{Type: ErrTimeout, Path: path, Err: fmt.Errorf("waiting for memory to decode a %d-byte document: %w", len(body), err)}
	}
	defer c.decode.Release(weight)
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return Document{}, &ReadError{Type: ErrDecode, Path: path, Err: err}
	}
	if list.Kind != "APIGroupDiscoveryList" {
		return Document{}, &ReadError{Type: ErrDecode, Path: path, Err: fmt.Errorf("kind %q, want APIGroupDiscoveryList", list.Kind)}
	}
	if err := merge.Validate(list.Items); err != nil {
		return Document{}, &ReadError{Type: ErrInvalid, Path: path, Err: err}
	}
	newETag := resp.Header.Get("ETag")
	if newETag == "" {
		// Without a server ETag, hash the document so changes still show.
		if newETag, err = merge.ETag(list.Items); err != nil {
			return Document{}, &ReadError{Type: ErrDecode, Path: path, Err: err}
		}
	}
	return Document{Items: list.Items, ETag: newETag}, nil
}

// Version GETs base/version and returns the server's gitVersion.
func (c *Client) Version(ctx context.Context, base string) (string, error) {
	_, body, err := c.get(ctx, base, "/version", "application/json", "")
	if err != nil {
		return "", err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return "", &ReadError{Type: ErrDecode, Path: "/version", Err: err}
	}
	return info.GitVersion, nil
}

// get returns a 200's body (at most maxBytes) or a 304; anything else is a
// *ReadError.
func (c *Client) get(ctx context.Context, base, path, accept, etag string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return nil, nil, &ReadError{Type: ErrConnection, Path: path, Err: err}
	}
	req.Header.Set("Accept", accept)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, &ReadError{Type: classify(ctx, err), Path: path, Err: err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return resp, nil, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, nil, &ReadError{Type: ErrRedirect, Path: path, Err: fmt.Errorf("redirect %d to %q refused", resp.StatusCode, resp.Header.Get("Location"))}
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, nil, &ReadError{Type: ErrStatus, Path: path, Err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)}
	}
	// Read one byte past the cap to tell "exactly the cap" from "more".
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		return nil, nil, &ReadError{Type: classify(ctx, err), Path: path, Err: err}
	}
	if ctx.Err() != nil {
		// The deadline passed while the body was read: the body may be cut
		// short even though the read reported no error (seen with a peer
		// that stalls mid-way through a chunked HTTP/1.1 body). That is a
		// timeout, not an undecodable document.
		return nil, nil, &ReadError{Type: ErrTimeout, Path: path, Err: context.Cause(ctx)}
	}
	if int64(len(body)) > c.maxBytes {
		return nil, nil, &ReadError{Type: ErrOversized, Path: path, Err: fmt.Errorf("document larger than %d bytes", c.maxBytes)}
	}
	return resp, body, nil
}

// checkMediaType accepts JSON that is aggregated discovery or does not say
// what it is (the kind is checked after decoding). Anything else (HTML from
// a proxy, protobuf, the legacy APIGroupList) is refused before decoding.
func checkMediaType(contentType string) error {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("Content-Type %q: %w", contentType, err)
	}
	if mt != "application/json" {
		return fmt.Errorf("Content-Type %q, want application/json aggregated discovery (%s)", contentType, Accept)
	}
	for k, want := range map[string]string{"g": "apidiscovery.k8s.io", "v": "v2", "as": "APIGroupDiscoveryList"} {
		if got, ok := params[k]; ok && got != want {
			return fmt.Errorf("Content-Type %q: %s=%s, want %s=%s (is the server older than aggregated discovery v2?)", contentType, k, got, k, want)
		}
	}
	return nil
}
