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

package memstore

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
)

// Test-only API types, so these tests do not depend on the real API package.

var testGroupVersion = schema.GroupVersion{Group: "test.peerdiscovery.k8s.io", Version: runtime.APIVersionInternal}

var widgetResource = schema.GroupResource{Group: testGroupVersion.Group, Resource: "widgets"}

func newTestScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(testGroupVersion, &Widget{}, &WidgetList{}, &RouteTable{}, &RouteTableList{})
	return s
}

// Widget is a simple cluster-scoped object.
type Widget struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec WidgetSpec
}

type WidgetSpec struct {
	Color string
	Size  int
	Tags  []string
}

type WidgetList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []Widget
}

func (in *Widget) DeepCopyInto(out *Widget) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.Tags != nil {
		out.Spec.Tags = append([]string(nil), in.Spec.Tags...)
	}
}

func (in *Widget) DeepCopy() *Widget {
	if in == nil {
		return nil
	}
	out := new(Widget)
	in.DeepCopyInto(out)
	return out
}

func (in *Widget) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *WidgetList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(WidgetList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Widget, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// widgetAttrs adds spec.color as a selectable field.
func widgetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	l, f, err := storage.DefaultClusterScopedAttr(obj)
	if err != nil {
		return nil, nil, err
	}
	f["spec.color"] = obj.(*Widget).Spec.Color
	return l, f, nil
}

// RouteTable is shaped like a PeerRoutingTable, for benchmarks.
type RouteTable struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Group       string
	Version     string
	Resource    string
	Kind        string
	Scope       string
	Reason      string
	ClusterWide bool
	Peers       []RoutePeer
}

type RoutePeer struct {
	ID       string
	Endpoint string
	Ready    bool
}

type RouteTableList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []RouteTable
}

func (in *RouteTable) DeepCopyInto(out *RouteTable) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Peers != nil {
		out.Peers = append([]RoutePeer(nil), in.Peers...)
	}
}

func (in *RouteTable) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(RouteTable)
	in.DeepCopyInto(out)
	return out
}

func (in *RouteTableList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(RouteTableList)
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]RouteTable, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
