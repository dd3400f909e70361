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

package nopeer

import (
	"context"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
)

// Documents are one server's /api and /apis, read together, each with its
// ETag.
type Documents struct {
	API, APIs         []apidiscoveryv2.APIGroupDiscovery
	APIETag, APIsETag string
}

// ReadDocuments reads base's /api, then its /apis: the one read of the pair,
// for the peer engine (each peer) and the filter (its own server). With
// prev, the pair this caller read last, each GET asks If-None-Match with
// prev's ETag of that document (none when it has none), and a document
// that answers 304 is prev's. notModified tells that both answered 304:
// docs is then prev.
//
// A one-sided 304 (one document unchanged, the other not) keeps prev's
// copy of the unchanged one and does not read it again: the 304 says that
// copy is what the server serves now, and a second GET would be no more
// consistent with the other document (two GETs are never one atomic
// read); it would only cost a request, and for /apis the server's
// marshalling of its whole document. prev must hold the documents its
// ETags name.
//
// Either read failing fails the pair (a *ReadError): the caller keeps its
// last good pair.
func (c *Client) ReadDocuments(ctx context.Context, base string, prev *Documents) (docs Documents, notModified bool, err error) {
	var last Documents
	if prev != nil {
		last = *prev
	}
	api, err := c.Discovery(ctx, base, "/api", last.APIETag)
	if err != nil {
		return Documents{}, false, err
	}
	apis, err := c.Discovery(ctx, base, "/apis", last.APIsETag)
	if err != nil {
		return Documents{}, false, err
	}
	if api.NotModified {
		api.Items = last.API
	}
	if apis.NotModified {
		apis.Items = last.APIs
	}
	docs = Documents{API: api.Items, APIs: apis.Items, APIETag: api.ETag, APIsETag: apis.ETag}
	return docs, api.NotModified && apis.NotModified, nil
}
