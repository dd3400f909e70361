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

package peerdiscovery

import (
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/routing"
)

const (
	// maxReviewPathBytes bounds spec.path: a request path with its query,
	// far above any real one (names are at most 253 bytes).
	maxReviewPathBytes = 4096
	// maxServerIDBytes bounds spec.sourcePeer: server IDs are Lease names
	// or host:port addresses.
	maxServerIDBytes = 253
	// maxEchoBytes bounds how much of a rejected value an error repeats:
	// the value comes from the client and may be large.
	maxEchoBytes = 64
	// maxNamedPeers bounds the known peers an unknown sourcePeer's error
	// names.
	maxNamedPeers = 10
)

var (
	specPath       = field.NewPath("spec")
	verbPath       = specPath.Child("verb")
	pathPath       = specPath.Child("path")
	sourcePeerPath = specPath.Child("sourcePeer")
)

// validateRouteReviewSpec checks the spec on its own; whether sourcePeer
// names a known peer is checked against the routing state (findSource).
// Each problem is reported once and repeats at most maxEchoBytes of the
// rejected value.
func validateRouteReviewSpec(spec *api.RouteReviewSpec) field.ErrorList {
	var errs field.ErrorList
	verbs := routing.ReviewVerbs()
	switch {
	case spec.Verb == "":
		errs = append(errs, field.Required(verbPath, "a Kubernetes request verb or an HTTP method"))
	case !slices.Contains(verbs, spec.Verb):
		errs = append(errs, field.NotSupported(verbPath, echo(spec.Verb), verbs))
	}
	switch {
	case spec.Path == "":
		errs = append(errs, field.Required(pathPath, "an absolute request path, e.g. /apis/apps/v1/deployments"))
	case len(spec.Path) > maxReviewPathBytes:
		errs = append(errs, field.TooLong(pathPath, "", maxReviewPathBytes))
	case spec.Path[0] != '/':
		errs = append(errs, field.Invalid(pathPath, echo(spec.Path), "must be an absolute request path, e.g. /apis/apps/v1/deployments"))
	default:
		verb := spec.Verb
		if !slices.Contains(verbs, verb) {
			verb = "get" // the verb's own error is reported above
		}
		if _, err := routing.ParseReviewRequest(verb, spec.Path); err != nil {
			errs = append(errs, field.Invalid(pathPath, echo(spec.Path), err.Error()))
		}
	}
	if len(spec.SourcePeer) > maxServerIDBytes {
		errs = append(errs, field.TooLong(sourcePeerPath, "", maxServerIDBytes))
	}
	return errs
}

// echo is s, cut to maxEchoBytes (at a rune boundary) with "..." added
// when longer.
func echo(s string) string {
	if len(s) <= maxEchoBytes {
		return s
	}
	n := maxEchoBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
