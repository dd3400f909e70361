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

package upgradedrill

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Namespace holds the drill's namespaced objects.
const Namespace = "upgrade-drill"

// Labels of every object the workload writes: the run, and the operation
// that created it (unique per create), so that a create sent twice shows
// up as two objects with one op label.
const (
	runLabel = "peerdiscovery.k8s.io/drill-run"
	opLabel  = "peerdiscovery.k8s.io/drill-op"
)

// kind is one resource the workload uses.
type kind struct {
	name       string
	gvr        schema.GroupVersionResource
	namespaced bool
	// newOnly: only the newer release serves it (used once a server of
	// that release is ready).
	newOnly bool
	object  func() map[string]any
}

// widgetsCRD is the CustomResourceDefinition of the drill's custom kind.
var widgetsGVR = schema.GroupVersionResource{Group: "drill.peerdiscovery.test", Version: "v1", Resource: "widgets"}

var kinds = []kind{
	{name: "configmaps", gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespaced: true,
		object: func() map[string]any {
			return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "v"}}
		}},
	{name: "deployments", gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespaced: true,
		object: func() map[string]any {
			labels := map[string]any{"app": "drill"}
			return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": map[string]any{
				"replicas": int64(0),
				"selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{
					"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}}}},
			}}
		}},
	{name: "widgets", gvr: widgetsGVR, namespaced: true,
		object: func() map[string]any {
			return map[string]any{"apiVersion": "drill.peerdiscovery.test/v1", "kind": "Widget", "spec": map[string]any{"size": int64(1)}}
		}},
	{name: "storageversionmigrations", gvr: schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"}, newOnly: true,
		object: func() map[string]any {
			return map[string]any{"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
				"spec": map[string]any{"resource": map[string]any{"group": "", "resource": "configmaps"}}}
		}},
}

// newObject is a kind's object for create operation op of run.
func (k kind) newObject(run string, op int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: k.object()}
	u.SetGenerateName("drill-")
	if k.namespaced {
		u.SetNamespace(Namespace)
	}
	u.SetLabels(map[string]string{runLabel: run, opLabel: strconv.FormatInt(op, 10)})
	return u
}

func (k kind) String() string { return fmt.Sprintf("%s (%s)", k.name, k.gvr.GroupVersion()) }

// widgetsCRD is the drill's CustomResourceDefinition.
func widgetsCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": widgetsGVR.Resource + "." + widgetsGVR.Group},
		"spec": map[string]any{
			"group": widgetsGVR.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}
