package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"golang.org/x/sync/semaphore"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

// AcceptNoPeer asks a kube-apiserver for its own (non-peer-aggregated)
// discovery. Servers that ignore the profile answer the same document type.
const AcceptNoPeer = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer"

// ErrorType classifies scrape failures; it is the "type" label of
// apiserver_peer_discovery_sync_errors_total and the Ready condition reason.
type ErrorType string

// Scrape failure types.
const (
	ErrRefused    ErrorType = "ConnectionRefused"
	ErrTLS        ErrorType = "TLSError"
	ErrTimeout    ErrorType = "Timeout"
	ErrStatus     ErrorType = "UnexpectedStatus"
	ErrRedirect   ErrorType = "Redirect"
	ErrDecode     ErrorType = "UndecodableDocument"
	ErrMediaType  ErrorType = "UnexpectedContentType"
	ErrInvalid    ErrorType = "InvalidDocument"
	ErrOversized  ErrorType = "OversizedDocument"
	ErrConnection ErrorType = "ConnectionError"
)

// ScrapeError is a classified scrape failure.
type ScrapeError struct {
	Type ErrorType
	Path string
	Err  error
}

func (e *ScrapeError) Error() string { return fmt.Sprintf("%s %s: %v", e.Type, e.Path, e.Err) }
func (e *ScrapeError) Unwrap() error { return e.Err }

// Document is one peer's discovery as read.
type Document struct {
	API, APIs         []apidiscoveryv2.APIGroupDiscovery
	APIETag, APIsETag string
	Version           string
	// NotModified is true when both documents answered 304: API and APIs
	// are then empty and the previous ones stay.
	NotModified bool
}

// decodeFactor is the memory a JSON discovery document takes while it is
// decoded, per byte of document: measured at about 3 for a 5,000-GVR
// document (1.7 MB), with room for less regular ones.
const decodeFactor = 8

// Scraper reads peers' discovery over HTTPS with the server's credentials,
// verifying peers' serving certificates against the peer CA.
type Scraper struct {
	client   *http.Client
	maxBytes int64
	// decode bounds the memory of documents being decoded at once:
	// decodeFactor × their size, up to decodeFactor × maxBytes in all, so a
	// burst of large documents decodes one after another instead of all
	// at once. Each document takes its whole share at once: no deadlock.
	decode *semaphore.Weighted
}

// NewScraper builds a scraper. base carries the credentials; caData the
// CA that signs peers' serving certificates; serverName the name verified
// in them (kube-apiservers' certificates carry kubernetes.default.svc).
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
	c := *client
	// A redirect from a peer is a failure, never followed: it could lead
	// the server's credentials anywhere.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Scraper{client: &c, maxBytes: maxBytes, decode: semaphore.NewWeighted(maxBytes * decodeFactor)}, nil
}

// Scrape reads /api, /apis and /version from endpoint (host:port). The
// previous ETags make unchanged documents cost a 304.
func (s *Scraper) Scrape(ctx context.Context, endpoint, prevAPIETag, prevAPIsETag string) (Document, error) {
	var doc Document
	var err error
	var apiNotModified, apisNotModified bool
	if doc.API, doc.APIETag, apiNotModified, err = s.discovery(ctx, endpoint, "/api", prevAPIETag); err != nil {
		return Document{}, err
	}
	if doc.APIs, doc.APIsETag, apisNotModified, err = s.discovery(ctx, endpoint, "/apis", prevAPIsETag); err != nil {
		return Document{}, err
	}
	if apiNotModified != apisNotModified {
		// One changed: re-read the other so the pair is consistent.
		if apiNotModified {
			doc.API, doc.APIETag, _, err = s.discovery(ctx, endpoint, "/api", "")
		} else {
			doc.APIs, doc.APIsETag, _, err = s.discovery(ctx, endpoint, "/apis", "")
		}
		if err != nil {
			return Document{}, err
		}
	}
	doc.NotModified = apiNotModified && apisNotModified
	if doc.Version, err = s.version(ctx, endpoint); err != nil {
		return Document{}, err
	}
	return doc, nil
}

func (s *Scraper) get(ctx context.Context, endpoint, path, accept, etag string) (*http.Response, []byte, error) {
	u := url.URL{Scheme: "https", Host: endpoint, Path: path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, &ScrapeError{Type: ErrConnection, Path: path, Err: err}
	}
	req.Header.Set("Accept", accept)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, &ScrapeError{Type: classify(ctx, err), Path: path, Err: err}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		return resp, nil, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, nil, &ScrapeError{Type: ErrRedirect, Path: path, Err: fmt.Errorf("redirect %d to %q refused", resp.StatusCode, resp.Header.Get("Location"))}
	case resp.StatusCode != http.StatusOK:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, nil, &ScrapeError{Type: ErrStatus, Path: path, Err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)}
	}
	// Read one byte past the cap to tell "exactly the cap" from "more".
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.maxBytes+1))
	if err != nil {
		return nil, nil, &ScrapeError{Type: classify(ctx, err), Path: path, Err: err}
	}
	if ctx.Err() != nil {
		// The deadline passed while the body was read: the body may be cut
		// short even though the read reported no error (seen with a peer
		// that stalls mid-way through a chunked HTTP/1.1 body). That is a
		// timeout, not an undecodable document.
		return nil, nil, &ScrapeError{Type: ErrTimeout, Path: path, Err: context.Cause(ctx)}
	}
	if int64(len(body)) > s.maxBytes {
		return nil, nil, &ScrapeError{Type: ErrOversized, Path: path, Err: fmt.Errorf("document larger than %d bytes", s.maxBytes)}
	}
	return resp, body, nil
}

func (s *Scraper) discovery(ctx context.Context, endpoint, path, etag string) ([]apidiscoveryv2.APIGroupDiscovery, string, bool, error) {
	resp, body, err := s.get(ctx, endpoint, path, AcceptNoPeer, etag)
	if err != nil {
		return nil, "", false, err
	}
	if resp.StatusCode == http.StatusNotModified {
		return nil, etag, true, nil
	}
	if err := checkMediaType(resp.Header.Get("Content-Type")); err != nil {
		return nil, "", false, &ScrapeError{Type: ErrMediaType, Path: path, Err: err}
	}
	weight := min(int64(len(body))*decodeFactor, s.maxBytes*decodeFactor)
	if err := s.decode.Acquire(ctx, weight); err != nil {
		return nil, "", false, &ScrapeError{Type: ErrTimeout, Path: path, Err: fmt.Errorf("waiting for memory to decode a %d-byte document: %w", len(body), err)}
	}
	defer s.decode.Release(weight)
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, "", false, &ScrapeError{Type: ErrDecode, Path: path, Err: err}
	}
	if list.Kind != "APIGroupDiscoveryList" {
		return nil, "", false, &ScrapeError{Type: ErrDecode, Path: path, Err: fmt.Errorf("kind %q, want APIGroupDiscoveryList", list.Kind)}
	}
	if err := merge.Validate(list.Items); err != nil {
		return nil, "", false, &ScrapeError{Type: ErrInvalid, Path: path, Err: err}
	}
	newETag := resp.Header.Get("ETag")
	if newETag == "" {
		// Without a server ETag, hash the document so changes still show.
		if newETag, err = merge.ETag(list.Items); err != nil {
			return nil, "", false, &ScrapeError{Type: ErrDecode, Path: path, Err: err}
		}
	}
	return list.Items, newETag, false, nil
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
		return fmt.Errorf("Content-Type %q, want application/json aggregated discovery (%s)", contentType, AcceptNoPeer)
	}
	for k, want := range map[string]string{"g": "apidiscovery.k8s.io", "v": "v2", "as": "APIGroupDiscoveryList"} {
		if got, ok := params[k]; ok && got != want {
			return fmt.Errorf("Content-Type %q: %s=%s, want %s=%s (is the peer older than aggregated discovery v2?)", contentType, k, got, k, want)
		}
	}
	return nil
}

func (s *Scraper) version(ctx context.Context, endpoint string) (string, error) {
	_, body, err := s.get(ctx, endpoint, "/version", "application/json", "")
	if err != nil {
		return "", err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return "", &ScrapeError{Type: ErrDecode, Path: "/version", Err: err}
	}
	return info.GitVersion, nil
}

func classify(ctx context.Context, err error) ErrorType {
	var verifyErr *tls.CertificateVerificationError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		return ErrTimeout
	case errors.As(err, &netErr) && netErr.Timeout():
		return ErrTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrRefused
	case errors.As(err, &verifyErr), errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return ErrTLS
	case strings.Contains(err.Error(), "tls: "):
		// TLS alerts (e.g. the peer rejected our client certificate) have
		// no exported type.
		return ErrTLS
	}
	return ErrConnection
}
