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

package merge

import (
	"errors"
	"fmt"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Caps on one peer's document. They are far above what real servers send (a
// v1.37 kube-apiserver lists ~25 groups and ~100 resources per version at
// most; large CRD estates reach a few hundred groups) and bound the memory and
// time a broken or hostile peer can cost.
const (
	MaxGroups                  = 4096  // groups per document
	MaxVersionsPerGroup        = 64    // versions per group
	MaxResourcesPerVersion     = 2048  // resources per group-version
	MaxResources               = 65536 // resources per document, all group-versions
	MaxSubresourcesPerResource = 64    // subresources per resource
	MaxVerbs                   = 64    // verbs per resource or subresource
	MaxShortNames              = 64    // short names per resource
	MaxCategories              = 64    // categories per resource
	MaxAcceptedTypes           = 64    // accepted types per subresource
	MaxNameLength              = 253   // any single string (name, verb, kind, ...)
)

// ErrInvalidDocument is wrapped by every error Validate returns.
var ErrInvalidDocument = errors.New("invalid peer discovery document")

// Validate checks one peer's document for hostile or broken content (empty or
// invalid names, duplicate groups/versions/resources/subresources, sizes over
// the Max* caps) and returns the first problem found, with its field path;
// callers reject the document and keep the previous good one.
//
// The core group "" is allowed (it is the /api document's only group).
// Repeated verbs are allowed: they do no harm and Merge dedups them when it
// merges a resource.
func Validate(groups []apidiscoveryv2.APIGroupDiscovery) error {
	fe, gi, vi := validate(groups)
	if fe == nil {
		return nil
	}
	// Name the group and version too: indexes alone are hard to act on.
	switch {
	case vi >= 0:
		return fmt.Errorf("%w: group %q version %q: %w", ErrInvalidDocument, clip(groups[gi].Name), clip(groups[gi].Versions[vi].Version), fe)
	case gi >= 0:
		return fmt.Errorf("%w: group %q: %w", ErrInvalidDocument, clip(groups[gi].Name), fe)
	}
	return fmt.Errorf("%w: %w", ErrInvalidDocument, fe)
}

// clip bounds a hostile name quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// validate returns the first problem and the indexes of the group and version
// it lies in (-1 when outside). Field paths are built only for the error:
// Validate runs on every fetch of every peer, and field.Path allocates.
func validate(groups []apidiscoveryv2.APIGroupDiscovery) (fe *field.Error, gi, vi int) {
	if len(groups) > MaxGroups {
		return field.TooMany(field.NewPath("items"), len(groups), MaxGroups), -1, -1
	}
	total := 0
	seenGroups := make(map[string]struct{}, len(groups))
	seen := make(map[string]struct{}) // resources of one version, reused
	for gi = range groups {
		g := &groups[gi]
		gp := func() *field.Path { return field.NewPath("items").Index(gi) }
		if len(g.Name) > MaxNameLength {
			return field.TooLong(gp().Child("metadata", "name"), "", MaxNameLength), gi, -1
		}
		if g.Name != "" {
			if msgs := validation.IsDNS1123Subdomain(g.Name); len(msgs) > 0 {
				return field.Invalid(gp().Child("metadata", "name"), g.Name, strings.Join(msgs, "; ")), gi, -1
			}
		}
		if _, dup := seenGroups[g.Name]; dup {
			return field.Duplicate(gp().Child("metadata", "name"), g.Name), gi, -1
		}
		seenGroups[g.Name] = struct{}{}

		if len(g.Versions) > MaxVersionsPerGroup {
			return field.TooMany(gp().Child("versions"), len(g.Versions), MaxVersionsPerGroup), gi, -1
		}
		for vi = range g.Versions {
			v := &g.Versions[vi]
			vp := func() *field.Path { return gp().Child("versions").Index(vi) }
			if len(v.Version) > MaxNameLength {
				return field.TooLong(vp().Child("version"), "", MaxNameLength), gi, vi
			}
			if msgs := validation.IsDNS1035Label(v.Version); len(msgs) > 0 {
				return field.Invalid(vp().Child("version"), v.Version, strings.Join(msgs, "; ")), gi, vi
			}
			for vj := 0; vj < vi; vj++ {
				if g.Versions[vj].Version == v.Version {
					return field.Duplicate(vp().Child("version"), v.Version), gi, vi
				}
			}
			switch v.Freshness {
			case "", apidiscoveryv2.DiscoveryFreshnessCurrent, apidiscoveryv2.DiscoveryFreshnessStale:
			default:
				return field.NotSupported(vp().Child("freshness"), v.Freshness,
					[]apidiscoveryv2.DiscoveryFreshness{apidiscoveryv2.DiscoveryFreshnessCurrent, apidiscoveryv2.DiscoveryFreshnessStale}), gi, vi
			}
			if len(v.Resources) > MaxResourcesPerVersion {
				return field.TooMany(vp().Child("resources"), len(v.Resources), MaxResourcesPerVersion), gi, vi
			}
			total += len(v.Resources)
			if total > MaxResources {
				return field.Forbidden(vp().Child("resources"), fmt.Sprintf("the document lists more than %d resources in total", MaxResources)), gi, vi
			}
			clear(seen)
			for ri := range v.Resources {
				r := &v.Resources[ri]
				at := where{g: gi, v: vi, r: ri, s: -1}
				if err := validateResource(at, r); err != nil {
					return err, gi, vi
				}
				if _, dup := seen[r.Resource]; dup {
					return field.Duplicate(at.path("resource", -1), r.Resource), gi, vi
				}
				seen[r.Resource] = struct{}{}
			}
		}
	}
	return nil, -1, -1
}

// where locates a resource (s < 0) or one of its subresources; path turns it
// into a field.Path once there is an error to report.
type where struct{ g, v, r, s int }

// path returns the path of field name (name[index] when index >= 0).
func (w where) path(name string, index int) *field.Path {
	p := field.NewPath("items").Index(w.g).Child("versions").Index(w.v).Child("resources").Index(w.r)
	if w.s >= 0 {
		p = p.Child("subresources").Index(w.s)
	}
	p = p.Child(name)
	if index >= 0 {
		p = p.Index(index)
	}
	return p
}

func validateResource(at where, r *apidiscoveryv2.APIResourceDiscovery) *field.Error {
	if err := checkName(at, "resource", r.Resource); err != nil {
		return err
	}
	if err := checkText(at, "singularResource", -1, r.SingularResource); err != nil {
		return err
	}
	if err := checkText(at, "scope", -1, string(r.Scope)); err != nil {
		return err
	}
	if err := checkGVK(at, "responseKind", -1, r.ResponseKind); err != nil {
		return err
	}
	if err := checkWords(at, "verbs", r.Verbs, MaxVerbs); err != nil {
		return err
	}
	if err := checkWords(at, "shortNames", r.ShortNames, MaxShortNames); err != nil {
		return err
	}
	if err := checkWords(at, "categories", r.Categories, MaxCategories); err != nil {
		return err
	}
	if len(r.Subresources) > MaxSubresourcesPerResource {
		return field.TooMany(at.path("subresources", -1), len(r.Subresources), MaxSubresourcesPerResource)
	}
	for si := range r.Subresources {
		s := &r.Subresources[si]
		sat := where{g: at.g, v: at.v, r: at.r, s: si}
		if err := checkName(sat, "subresource", s.Subresource); err != nil {
			return err
		}
		for sj := 0; sj < si; sj++ {
			if r.Subresources[sj].Subresource == s.Subresource {
				return field.Duplicate(sat.path("subresource", -1), s.Subresource)
			}
		}
		if err := checkGVK(sat, "responseKind", -1, s.ResponseKind); err != nil {
			return err
		}
		if len(s.AcceptedTypes) > MaxAcceptedTypes {
			return field.TooMany(sat.path("acceptedTypes", -1), len(s.AcceptedTypes), MaxAcceptedTypes)
		}
		for ai := range s.AcceptedTypes {
			if err := checkGVK(sat, "acceptedTypes", ai, &s.AcceptedTypes[ai]); err != nil {
				return err
			}
		}
		if err := checkWords(sat, "verbs", s.Verbs, MaxVerbs); err != nil {
			return err
		}
	}
	return nil
}

// checkName checks a resource or subresource name: it becomes one URL path
// segment, so it must be non-empty and free of '/', '%', "." and "..".
func checkName(at where, name, s string) *field.Error {
	if s == "" {
		return field.Required(at.path(name, -1), "")
	}
	if err := checkText(at, name, -1, s); err != nil {
		return err
	}
	if s == "." || s == ".." || strings.ContainsAny(s, "/%") {
		return field.Invalid(at.path(name, -1), s, "must be a valid URL path segment (no '/', '%', '.' or '..')")
	}
	return nil
}

func checkWords(at where, name string, words []string, limit int) *field.Error {
	if len(words) > limit {
		return field.TooMany(at.path(name, -1), len(words), limit)
	}
	for i, w := range words {
		if w == "" {
			return field.Required(at.path(name, i), "")
		}
		if err := checkText(at, name, i, w); err != nil {
			return err
		}
	}
	return nil
}

func checkGVK(at where, name string, index int, gvk *metav1.GroupVersionKind) *field.Error {
	if gvk == nil {
		return nil
	}
	for _, f := range []struct{ name, val string }{{"group", gvk.Group}, {"version", gvk.Version}, {"kind", gvk.Kind}} {
		if !isText(f.val) {
			return textError(at.path(name, index).Child(f.name), f.val)
		}
	}
	return nil
}

func checkText(at where, name string, index int, s string) *field.Error {
	if isText(s) {
		return nil
	}
	return textError(at.path(name, index), s)
}

// isText bounds a free-form string: printable ASCII without spaces, which
// every Kubernetes name, verb and kind is, and at most MaxNameLength bytes.
func isText(s string) bool {
	if len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

func textError(p *field.Path, s string) *field.Error {
	if len(s) > MaxNameLength {
		return field.TooLong(p, "", MaxNameLength)
	}
	return field.Invalid(p, s, "must be printable ASCII without spaces")
}
