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
	"net/url"

	"sigs.k8s.io/peerdiscovery/pkg/nopeer"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/client-go/rest"
)

// ScrapeFunc reads one peer's discovery; prev is the pair last read from
// it (nil: none). (*Scraper).Scrape is one.
type ScrapeFunc func(ctx context.Context, endpoint string, prev *nopeer.Documents) (Document, error)

// HeartbeatFunc asks one peer for its /version only: the readiness
// heartbeat between full reads. (*Scraper).Heartbeat is one.
type HeartbeatFunc func(ctx context.Context, endpoint string) (version string, err error)

// Document is one peer's discovery as read.
type Document struct {
	API, APIs         []apidiscoveryv2.APIGroupDiscovery
	APIETag, APIsETag string
	Version           string
	// NotModified is true when both documents answered 304: API and APIs
	// are then empty and the previous ones stay. A document that alone
	// answered 304 is the previous one (nopeer.ReadDocuments).
	NotModified bool
}

// Scraper reads peers' discovery over HTTPS with the server's credentials,
// verifying peers' serving certificates against the peer CA.
type Scraper struct {
	client *nopeer.Client
}

// NewScraper builds a scraper. base carries the credentials; caData the
// CA that signs peers' serving certificates; serverName the name verified
// in them (nopeer.DefaultPeerServerName unless told otherwise).
func NewScraper(base *rest.Config, caData []byte, serverName string, maxBytes int64) (*Scraper, error) {
	cfg := rest.CopyConfig(base)
	cfg.TLSClientConfig.CAFile = ""
	cfg.TLSClientConfig.CAData = caData
	cfg.TLSClientConfig.ServerName = serverName
	cfg.TLSClientConfig.Insecure = false
	// Per-request deadlines come from the caller's context.
	cfg.Timeout = 0
	// Rate limits belong to the apiserver API, not to direct peer reads.
	cfg.QPS, cfg.Burst = -1, -1
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Scraper{client: nopeer.NewClient(client, maxBytes)}, nil
}

// Scrape reads /api, /apis and /version from endpoint (host:port). prev's
// ETags make unchanged documents cost a 304. Failures are
// *nopeer.ReadError.
func (s *Scraper) Scrape(ctx context.Context, endpoint string, prev *nopeer.Documents) (Document, error) {
	base := (&url.URL{Scheme: "https", Host: endpoint}).String()
	docs, notModified, err := s.client.ReadDocuments(ctx, base, prev)
	if err != nil {
		return Document{}, err
	}
	doc := Document{APIETag: docs.APIETag, APIsETag: docs.APIsETag, NotModified: notModified}
	if !notModified {
		doc.API, doc.APIs = docs.API, docs.APIs
	}
	if doc.Version, err = s.client.Version(ctx, base); err != nil {
		return Document{}, err
	}
	return doc, nil
}

// Heartbeat reads /version from endpoint: a static document, so the peer
// neither rebuilds its discovery (kube-aggregator invalidates that cache
// on every APIService resync) nor asks etcd (as /readyz would). Failures
// are *nopeer.ReadError, as Scrape's.
func (s *Scraper) Heartbeat(ctx context.Context, endpoint string) (string, error) {
	return s.client.Version(ctx, (&url.URL{Scheme: "https", Host: endpoint}).String())
}
