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
	"math/rand/v2"
	"reflect"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestResourceEqualIsDeepEqual pins resourceEqual to reflect.DeepEqual, which
// upstream uses, nil-versus-empty distinctions included.
func TestResourceEqualIsDeepEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(opts ...string) string { return opts[rng.IntN(len(opts))] }
	strs := func() []string {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{}
		case 2:
			return []string{pick("get", "list")}
		default:
			return []string{"get", pick("list", "watch")}
		}
	}
	gvk := func() *metav1.GroupVersionKind {
		if rng.IntN(3) == 0 {
			return nil
		}
		return &metav1.GroupVersionKind{Group: pick("", "g"), Version: "v1", Kind: pick("A", "B")}
	}
	gvks := func() []metav1.GroupVersionKind {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []metav1.GroupVersionKind{}
		default:
			return []metav1.GroupVersionKind{*gvk2(pick("A", "B"))}
		}
	}
	subs := func() []apidiscoveryv2.APISubresourceDiscovery {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []apidiscoveryv2.APISubresourceDiscovery{}
		default:
			return []apidiscoveryv2.APISubresourceDiscovery{{Subresource: pick("status", "scale"), ResponseKind: gvk(), AcceptedTypes: gvks(), Verbs: strs()}}
		}
	}
	gen := func() apidiscoveryv2.APIResourceDiscovery {
		return apidiscoveryv2.APIResourceDiscovery{
			Resource: pick("", "r"), ResponseKind: gvk(), Scope: apidiscoveryv2.ResourceScope(pick("", "Cluster")),
			SingularResource: pick("", "s"), Verbs: strs(), ShortNames: strs(), Categories: strs(), Subresources: subs(),
		}
	}
	equal := 0
	for i := 0; i < 200000; i++ {
		a, b := gen(), gen()
		if got, want := resourceEqual(&a, &b), reflect.DeepEqual(a, b); got != want {
			t.Fatalf("resourceEqual=%v DeepEqual=%v\na=%#v\nb=%#v", got, want, a, b)
		}
		if resourceEqual(&a, &b) {
			equal++
		}
	}
	if equal == 0 {
		t.Fatal("generator never produced equal resources")
	}
}

func gvk2(kind string) *metav1.GroupVersionKind {
	return &metav1.GroupVersionKind{Group: "g", Version: "v1", Kind: kind}
}

func TestResourceEqualCoversEveryField(t *testing.T) {
	// equal.go and copy.go list fields by hand; a new field in a k8s.io/api
	// bump must be added there too.
	for _, c := range []struct {
		typ  any
		want int
	}{
		{apidiscoveryv2.APIGroupDiscovery{}, 3},
		{apidiscoveryv2.APIVersionDiscovery{}, 3},
		{apidiscoveryv2.APIResourceDiscovery{}, 8},
		{apidiscoveryv2.APISubresourceDiscovery{}, 4},
		{metav1.GroupVersionKind{}, 3},
	} {
		if n := reflect.TypeOf(c.typ).NumField(); n != c.want {
			t.Errorf("%T has %d fields, equal.go and copy.go handle %d", c.typ, n, c.want)
		}
	}
}
