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
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// build copies the merged groups out in the given order. The accumulated
// groups alias the inputs; copying gives the caller a value it owns. Every
// slice is carved from a few large backing arrays (capacity clipped, so an
// append by the caller cannot spill into a neighbour), which keeps the copy to
// a handful of allocations. nil and empty slices stay distinct: the ETag
// (JSON "null" vs "[]") and reflect.DeepEqual both see the difference.
func (m *merger) build(order []string) []apidiscoveryv2.APIGroupDiscovery {
	var c sizes
	for _, name := range order {
		acc := &m.accs[m.index[name]]
		c.versions += len(acc.versions)
		for i := range acc.versions {
			c.countVersion(&acc.versions[i])
		}
	}
	a := newArena(c)
	out := make([]apidiscoveryv2.APIGroupDiscovery, len(order))
	for i, name := range order {
		acc := &m.accs[m.index[name]]
		g := &out[i]
		g.TypeMeta = acc.src.TypeMeta
		acc.src.ObjectMeta.DeepCopyInto(&g.ObjectMeta)
		if acc.versions != nil {
			g.Versions = a.versions(len(acc.versions))
			for j := range acc.versions {
				a.copyVersion(&g.Versions[j], &acc.versions[j])
			}
		}
	}
	return out
}

type sizes struct {
	versions, resources, subresources, strings, gvks int
}

func (c *sizes) countVersion(v *apidiscoveryv2.APIVersionDiscovery) {
	c.resources += len(v.Resources)
	for i := range v.Resources {
		r := &v.Resources[i]
		if r.ResponseKind != nil {
			c.gvks++
		}
		c.strings += len(r.Verbs) + len(r.ShortNames) + len(r.Categories)
		c.subresources += len(r.Subresources)
		for j := range r.Subresources {
			s := &r.Subresources[j]
			if s.ResponseKind != nil {
				c.gvks++
			}
			c.gvks += len(s.AcceptedTypes)
			c.strings += len(s.Verbs)
		}
	}
}

type arena struct {
	vs   []apidiscoveryv2.APIVersionDiscovery
	rs   []apidiscoveryv2.APIResourceDiscovery
	ss   []apidiscoveryv2.APISubresourceDiscovery
	strs []string
	gvks []metav1.GroupVersionKind
}

func newArena(c sizes) *arena {
	return &arena{
		vs:   make([]apidiscoveryv2.APIVersionDiscovery, c.versions),
		rs:   make([]apidiscoveryv2.APIResourceDiscovery, c.resources),
		ss:   make([]apidiscoveryv2.APISubresourceDiscovery, c.subresources),
		strs: make([]string, c.strings),
		gvks: make([]metav1.GroupVersionKind, c.gvks),
	}
}

func carve[T any](pool *[]T, n int) []T {
	s := (*pool)[:n:n]
	*pool = (*pool)[n:]
	return s
}

func (a *arena) versions(n int) []apidiscoveryv2.APIVersionDiscovery { return carve(&a.vs, n) }

func (a *arena) strings(src []string) []string {
	if src == nil {
		return nil
	}
	dst := carve(&a.strs, len(src))
	copy(dst, src)
	return dst
}

func (a *arena) gvk(src *metav1.GroupVersionKind) *metav1.GroupVersionKind {
	if src == nil {
		return nil
	}
	dst := &carve(&a.gvks, 1)[0]
	*dst = *src
	return dst
}

func (a *arena) copyVersion(dst, src *apidiscoveryv2.APIVersionDiscovery) {
	dst.Version = src.Version
	dst.Freshness = src.Freshness
	if src.Resources == nil {
		return
	}
	dst.Resources = carve(&a.rs, len(src.Resources))
	for i := range src.Resources {
		a.copyResource(&dst.Resources[i], &src.Resources[i])
	}
}

func (a *arena) copyResource(dst, src *apidiscoveryv2.APIResourceDiscovery) {
	dst.Resource = src.Resource
	dst.ResponseKind = a.gvk(src.ResponseKind)
	dst.Scope = src.Scope
	dst.SingularResource = src.SingularResource
	dst.Verbs = a.strings(src.Verbs)
	dst.ShortNames = a.strings(src.ShortNames)
	dst.Categories = a.strings(src.Categories)
	if src.Subresources == nil {
		return
	}
	dst.Subresources = carve(&a.ss, len(src.Subresources))
	for i := range src.Subresources {
		s, d := &src.Subresources[i], &dst.Subresources[i]
		d.Subresource = s.Subresource
		d.ResponseKind = a.gvk(s.ResponseKind)
		if s.AcceptedTypes != nil {
			d.AcceptedTypes = carve(&a.gvks, len(s.AcceptedTypes))
			copy(d.AcceptedTypes, s.AcceptedTypes)
		}
		d.Verbs = a.strings(s.Verbs)
	}
}
