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

package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// ListVariant is how a LIST asks: media type, page size (0: one page),
// gzip accepted or not (client-go accepts it).
type ListVariant struct {
	Protobuf bool `json:"protobuf"`
	Limit    int  `json:"limit"`
	Gzip     bool `json:"gzip"`
}

func (v ListVariant) String() string {
	s := "json"
	if v.Protobuf {
		s = "protobuf"
	}
	if v.Limit > 0 {
		s += " limit=" + strconv.Itoa(v.Limit)
	} else {
		s += " one page"
	}
	if v.Gzip {
		s += " gzip"
	}
	return s
}

// ListSample is one whole LIST (every page).
type ListSample struct {
	Path    string      `json:"path"`
	Variant ListVariant `json:"variant"`
	Round   int         `json:"round"`
	// FirstByte is from sending the first page's request to its response
	// headers; Took is the sum over pages of request to last byte (the
	// client's decoding between pages is not counted).
	FirstByte time.Duration `json:"firstByte"`
	Took      time.Duration `json:"took"`
	Pages     int           `json:"pages"`
	Items     int           `json:"items"`
	// WireBytes were received (compressed when gzip), Bytes decoded.
	WireBytes int64 `json:"wireBytes"`
	Bytes     int64 `json:"bytes"`
}

// ListResult is the LIST measurement.
type ListResult struct {
	Objects     int          `json:"objects"`
	ObjectBytes int          `json:"objectBytes"` // average, as JSON
	Samples     []ListSample `json:"samples"`
	// SourceRSS is each path's source kube-apiserver's RSS: before the
	// LISTs and the peak while its LISTs ran.
	SourceRSSBefore map[string]float64 `json:"sourceRSSBefore"`
	SourceRSSPeak   map[string]float64 `json:"sourceRSSPeak"`
	// Profiles of the proxied paths' servers while they LIST (protobuf,
	// one page: the most bytes through the hop).
	Profiles []CPUProfile `json:"profiles,omitempty"`
}

// listVariants are every combination.
func listVariants(pageSize int) []ListVariant {
	var out []ListVariant
	for _, pb := range []bool{false, true} {
		for _, limit := range []int{0, pageSize} {
			for _, gz := range []bool{false, true} {
				out = append(out, ListVariant{Protobuf: pb, Limit: limit, Gzip: gz})
			}
		}
	}
	return out
}

// RunList seeds every plane with the scale's objects, then LISTs them
// ListRounds times per path and variant: per round, each path in turn
// (rotated each round) runs every variant.
func RunList(ctx context.Context, planes []*Plane, paths []*Path, s Scale, dir string, logf func(string, ...any)) (*ListResult, error) {
	res := &ListResult{Objects: s.ListObjects, SourceRSSBefore: map[string]float64{}, SourceRSSPeak: map[string]float64{}}
	for _, pl := range planes {
		cfg := pl.C.AdminConfig(pl.serverOf(NewVersion))
		pad, err := padFor(ctx, cfg, s.ListObjectBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pl.Routing, err)
		}
		start := time.Now()
		if err := createSVMs(ctx, cfg, "list", s.ListObjects, pad, 16); err != nil {
			return nil, fmt.Errorf("%s: creating the LIST objects: %w", pl.Routing, err)
		}
		logf("%s: %d objects created in %s", pl.Routing, s.ListObjects, time.Since(start).Round(time.Second))
	}
	clients := map[*Path]*http.Client{}
	for _, p := range paths {
		c, err := httpClient(p.Config())
		if err != nil {
			return nil, err
		}
		clients[p] = c
		pid, err := p.plane.C.ServerPID(p.server)
		if err != nil {
			return nil, err
		}
		if res.SourceRSSBefore[p.Name()], err = rssBytes(pid); err != nil {
			return nil, err
		}
		// Warm the connection and the path (the proxied one's routing).
		if _, err := do(ctx, c, http.MethodGet, url(p.Config(), svmPath+"?limit=1"), nil, http.StatusOK); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name(), err)
		}
	}
	variants := listVariants(s.ListPageSize)
	for round := range s.ListRounds {
		for _, p := range rotate(paths, round) {
			pid, _ := p.plane.C.ServerPID(p.server)
			rss := startSampler(100*time.Millisecond, func() (float64, error) { return rssBytes(pid) })
			for _, v := range rotate(variants, round) {
				sample, err := listOnce(ctx, clients[p], p, v, s.ListObjects)
				if err != nil {
					rss.end()
					return nil, fmt.Errorf("%s %s: %w", p.Name(), v, err)
				}
				sample.Round = round
				res.Samples = append(res.Samples, sample)
				if !v.Protobuf && !v.Gzip && v.Limit == 0 && res.ObjectBytes == 0 {
					res.ObjectBytes = int(sample.Bytes) / max(sample.Items, 1)
				}
			}
			peak, _ := rss.end()
			res.SourceRSSPeak[p.Name()] = max(res.SourceRSSPeak[p.Name()], peak)
		}
		logf("LIST round %d of %d done", round+1, s.ListRounds)
	}
	if s.ProfileSeconds > 0 {
		heaviest := ListVariant{Protobuf: true}
		for _, p := range paths {
			if p.Mode != "proxied" {
				continue
			}
			profs, err := profileWhile(ctx, p, "list", "LIST "+heaviest.String(), s.ProfileSeconds, dir, func() error {
				_, err := listOnce(ctx, clients[p], p, heaviest, s.ListObjects)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("profiling %s: %w", p.Name(), err)
			}
			res.Profiles = append(res.Profiles, profs...)
		}
	}
	return res, nil
}

// maxPages bounds one LIST.
const maxPages = 1000

// listOnce LISTs every object through p with v, and checks that want
// objects came back.
func listOnce(ctx context.Context, client *http.Client, p *Path, v ListVariant, want int) (ListSample, error) {
	out := ListSample{Path: p.Name(), Variant: v}
	cont := ""
	for out.Pages < maxPages {
		q := neturl.Values{}
		if v.Limit > 0 {
			q.Set("limit", strconv.Itoa(v.Limit))
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url(p.Config(), svmPath+"?"+q.Encode()), nil)
		if err != nil {
			return out, err
		}
		req.Header.Set("Accept", "application/json")
		if v.Protobuf {
			req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
		}
		if v.Gzip {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		var raw bytes.Buffer
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return out, err
		}
		if out.Pages == 0 {
			out.FirstByte = time.Since(start)
		}
		_, err = io.Copy(&raw, resp.Body)
		resp.Body.Close()
		out.Took += time.Since(start)
		if err != nil {
			return out, err
		}
		if resp.StatusCode != http.StatusOK {
			return out, fmt.Errorf("LIST: %d %s", resp.StatusCode, truncate(raw.Bytes(), 300))
		}
		out.Pages++
		out.WireBytes += int64(raw.Len())
		body := raw.Bytes()
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(&raw)
			if err != nil {
				return out, err
			}
			if body, err = io.ReadAll(zr); err != nil {
				return out, err
			}
		}
		out.Bytes += int64(len(body))
		n, next, err := parseList(body, v.Protobuf)
		if err != nil {
			return out, err
		}
		out.Items += n
		if cont = next; cont == "" {
			break
		}
	}
	if out.Items < want {
		return out, fmt.Errorf("LIST returned %d objects, want at least %d", out.Items, want)
	}
	return out, nil
}

// parseList returns the number of items of a list and its continue token.
func parseList(body []byte, protobuf bool) (int, string, error) {
	if protobuf {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return 0, "", err
		}
		l, ok := obj.(*storagemigrationv1.StorageVersionMigrationList)
		if !ok {
			return 0, "", fmt.Errorf("protobuf LIST decoded to %T", obj)
		}
		return len(l.Items), l.Continue, nil
	}
	var l struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, "", err
	}
	return len(l.Items), l.Metadata.Continue, nil
}
