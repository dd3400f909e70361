package merge

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// resourceEqual is reflect.DeepEqual on two resources (upstream's test at
// PAH:323), written out because reflection dominated upstream's merge time.
// It must keep DeepEqual's rules: a nil slice differs from an empty one, and
// pointers compare by pointee. A test pins it to reflect.DeepEqual.
func resourceEqual(a, b *apidiscoveryv2.APIResourceDiscovery) bool {
	return a.Resource == b.Resource &&
		a.Scope == b.Scope &&
		a.SingularResource == b.SingularResource &&
		gvkPtrEqual(a.ResponseKind, b.ResponseKind) &&
		stringsEqual(a.Verbs, b.Verbs) &&
		stringsEqual(a.ShortNames, b.ShortNames) &&
		stringsEqual(a.Categories, b.Categories) &&
		subresourcesEqual(a.Subresources, b.Subresources)
}

func subresourcesEqual(a, b []apidiscoveryv2.APISubresourceDiscovery) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Subresource != y.Subresource ||
			!gvkPtrEqual(x.ResponseKind, y.ResponseKind) ||
			!gvksEqual(x.AcceptedTypes, y.AcceptedTypes) ||
			!stringsEqual(x.Verbs, y.Verbs) {
			return false
		}
	}
	return true
}

func stringsEqual(a, b []string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func gvkPtrEqual(a, b *metav1.GroupVersionKind) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func gvksEqual(a, b []metav1.GroupVersionKind) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
