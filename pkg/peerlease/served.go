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

package peerlease

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"sigs.k8s.io/peerdiscovery/pkg/merge"
)

// What a kube-apiserver serves itself is recorded in its registration
// Lease by its own filter, from its first renewal after it read its own
// discovery and whenever that changes, and it stays there when the server
// departs or crashes: every replica of the engine, including one started
// after any combination of crashes and restarts, reads a gone server's
// tombstone from the API rather than from its own memory (a crash writes
// no goodbye).
const (
	// ServedResourcesAnnotation lists what the server serves itself; see
	// EncodeServed for the format.
	ServedResourcesAnnotation = "peerdiscovery.k8s.io/served-resources"

	// MaxServedEncodedBytes caps the annotation (all of a Lease's
	// annotations together may not exceed 256 KiB). A larger list is left
	// out.
	MaxServedEncodedBytes = 128 << 10
	// MaxServedDecodedBytes and MaxServedResources bound what a hostile
	// annotation can cost a reader: a small gzip stream can expand a lot.
	MaxServedDecodedBytes = 4 << 20
	MaxServedResources    = 65536

	maxServedField = 253
)

// ServedResource is one resource a server served, with its scope: the
// scope is part of the routing table a tombstone contributes to.
//
// Kind and Verbs make the entry usable in merged discovery: clients drop a
// resource without a kind (client-go's aggregated discovery does, without
// an error), and the namespace controller deletes only what lists the
// delete verb, so a list without them hides a gone server's objects from
// a namespace deletion. A record written before they were recorded has
// neither.
type ServedResource struct {
	schema.GroupVersionResource
	Scope apidiscoveryv2.ResourceScope
	Kind  string
	Verbs []string
}

// maxServedVerbs bounds the verbs of one entry.
const maxServedVerbs = 16

func (r ServedResource) line() string {
	return r.Group + "/" + r.Version + "/" + r.Resource + "/" + string(r.Scope) + "/" + r.Kind + "/" + strings.Join(r.Verbs, ",")
}

// ServedFromDiscovery lists the resources (not subresources) of aggregated
// discovery documents, as routing tables count them, with each one's kind
// and verbs (sorted).
func ServedFromDiscovery(docs ...[]apidiscoveryv2.APIGroupDiscovery) []ServedResource {
	var out []ServedResource
	for gvr, r := range merge.Resources(docs...) {
		sr := ServedResource{GroupVersionResource: gvr, Scope: r.Scope}
		if r.ResponseKind != nil {
			sr.Kind = r.ResponseKind.Kind
		}
		// What would not validate is left out of the entry, never the
		// entry out of the record: the GVR and scope decide a route.
		if validateServed(ServedResource{GroupVersionResource: gvr, Scope: r.Scope, Kind: sr.Kind}) != nil {
			sr.Kind = ""
		}
		verbs := slices.Compact(slices.Sorted(slices.Values(r.Verbs)))
		if validateServed(ServedResource{GroupVersionResource: gvr, Scope: r.Scope, Verbs: verbs}) == nil {
			sr.Verbs = verbs
		}
		out = append(out, sr)
	}
	return out
}

// EncodeServed encodes a resource list for ServedResourcesAnnotation:
// base64 (standard, padded) of gzip of the lines
// "group/version/resource/scope/kind/verbs" (core group empty, scope
// Namespaced or Cluster, verbs sorted and joined by ","; DecodeServed also
// reads the older "group/version/resource/scope"), sorted, one per
// group-version-resource, joined by "\n". The same set always
// gives the same string. It fails on an entry DecodeServed would reject and
// when the result exceeds MaxServedEncodedBytes.
func EncodeServed(rs []ServedResource) (string, error) {
	if len(rs) > MaxServedResources {
		return "", fmt.Errorf("%d resources, more than %d", len(rs), MaxServedResources)
	}
	lines := make([]string, 0, len(rs))
	for _, r := range rs {
		if err := validateServed(r); err != nil {
			return "", err
		}
		lines = append(lines, r.line())
	}
	sort.Strings(lines)
	// One line per GVR: a resource listed in two documents counts once,
	// as in the routing tables.
	out := lines[:0]
	var prev schema.GroupVersionResource
	for i, l := range lines {
		r, _ := parseServedLine(l)
		if i > 0 && r.GroupVersionResource == prev {
			continue
		}
		prev = r.GroupVersionResource
		out = append(out, l)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := io.WriteString(zw, strings.Join(out, "\n")); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	s := base64.StdEncoding.EncodeToString(buf.Bytes())
	if len(s) > MaxServedEncodedBytes {
		return "", fmt.Errorf("%d resources encode to %d bytes, more than %d", len(out), len(s), MaxServedEncodedBytes)
	}
	return s, nil
}

// DecodeServed reads ServedResourcesAnnotation. It accepts only what
// EncodeServed writes (sorted, unique, valid lines) within the size caps.
// An empty list decodes to an empty, non-nil slice.
func DecodeServed(s string) ([]ServedResource, error) {
	if len(s) > MaxServedEncodedBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(s), MaxServedEncodedBytes)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	// Reading to EOF checks the gzip trailer (length and CRC).
	text, err := io.ReadAll(io.LimitReader(zr, MaxServedDecodedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	if len(text) > MaxServedDecodedBytes {
		return nil, fmt.Errorf("decodes to more than %d bytes", MaxServedDecodedBytes)
	}
	out := []ServedResource{}
	if len(text) == 0 {
		return out, nil
	}
	lines := strings.Split(string(text), "\n")
	if len(lines) > MaxServedResources {
		return nil, fmt.Errorf("%d resources, more than %d", len(lines), MaxServedResources)
	}
	seen := make(map[schema.GroupVersionResource]struct{}, len(lines))
	for i, l := range lines {
		r, err := parseServedLine(l)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if i > 0 && l <= lines[i-1] {
			return nil, fmt.Errorf("line %d: not sorted", i+1)
		}
		if _, dup := seen[r.GroupVersionResource]; dup {
			return nil, fmt.Errorf("line %d: %s listed twice", i+1, r.GroupVersionResource)
		}
		seen[r.GroupVersionResource] = struct{}{}
		out = append(out, r)
	}
	return out, nil
}

func parseServedLine(l string) (ServedResource, error) {
	parts := strings.Split(l, "/")
	if len(parts) != 4 && len(parts) != 6 {
		return ServedResource{}, fmt.Errorf("%q is not group/version/resource/scope[/kind/verbs]", clip(l))
	}
	r := ServedResource{
		GroupVersionResource: schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]},
		Scope:                apidiscoveryv2.ResourceScope(parts[3]),
	}
	if len(parts) == 6 {
		r.Kind = parts[4]
		if parts[5] != "" {
			r.Verbs = strings.Split(parts[5], ",")
		}
	}
	return r, validateServed(r)
}

// validateServed applies the rules peers' discovery documents are held to
// (pkg/merge): a DNS subdomain or empty group, a DNS label version, a
// resource that is a URL path segment of printable ASCII.
func validateServed(r ServedResource) error {
	if r.Group != "" && len(validation.IsDNS1123Subdomain(r.Group)) > 0 {
		return fmt.Errorf("group %q is not a DNS subdomain", clip(r.Group))
	}
	if len(validation.IsDNS1035Label(r.Version)) > 0 {
		return fmt.Errorf("version %q is not a DNS label", clip(r.Version))
	}
	res := r.Resource
	if res == "" || len(res) > maxServedField || res == "." || res == ".." || strings.ContainsAny(res, "/%") {
		return fmt.Errorf("resource %q is not a URL path segment", clip(res))
	}
	for i := 0; i < len(res); i++ {
		if c := res[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("resource %q is not printable ASCII", clip(res))
		}
	}
	if r.Scope != apidiscoveryv2.ScopeNamespace && r.Scope != apidiscoveryv2.ScopeCluster {
		return fmt.Errorf("scope %q of %s is neither %s nor %s", clip(string(r.Scope)), r.GroupVersionResource, apidiscoveryv2.ScopeNamespace, apidiscoveryv2.ScopeCluster)
	}
	if r.Kind != "" && len(validation.IsDNS1035Label(strings.ToLower(r.Kind))) > 0 {
		return fmt.Errorf("kind %q of %s is not an identifier", clip(r.Kind), r.GroupVersionResource)
	}
	if len(r.Verbs) > maxServedVerbs {
		return fmt.Errorf("%d verbs for %s, more than %d", len(r.Verbs), r.GroupVersionResource, maxServedVerbs)
	}
	for i, v := range r.Verbs {
		if len(validation.IsDNS1035Label(v)) > 0 || v != strings.ToLower(v) || (i > 0 && v <= r.Verbs[i-1]) {
			return fmt.Errorf("verbs of %s are not sorted, unique lowercase words: %q", r.GroupVersionResource, clip(strings.Join(r.Verbs, ",")))
		}
	}
	return nil
}

// clip bounds a hostile string quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// parseServed reads the served-resources annotation of a Lease; nil when
// absent.
func parseServed(l *coordinationv1.Lease) ([]ServedResource, error) {
	raw, ok := l.Annotations[ServedResourcesAnnotation]
	if !ok {
		return nil, nil
	}
	served, err := DecodeServed(raw)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", ServedResourcesAnnotation, err)
	}
	return served, nil
}
