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

// Package workload is the bounded client load that the upgrade drill
// (test/upgradedrill) and the chaos soak (test/chaos) put on a local
// control plane, and what they check afterwards: creates, reads, lists,
// updates, deletes and watches over a set of kinds through every
// kube-apiserver in a load balancer's rotation, namespaces created and
// deleted, client-go informers pinned to each server, every HTTP attempt
// and every operation recorded, and the checks against quorum lists
// (writes lost or applied twice, informers, namespaces that left objects
// behind).
package workload

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Labels of every object the workload writes: the run, and the operation
// that created it (unique per create), so that a create sent twice shows
// up as two objects with one op label.
const (
	RunLabel = "peerdiscovery.k8s.io/workload-run"
	OpLabel  = "peerdiscovery.k8s.io/workload-op"
)

// Kind is one resource the workload uses.
type Kind struct {
	Name       string
	GVR        schema.GroupVersionResource
	Namespaced bool
	object     func() map[string]any
}

// WidgetsGVR is the resource of the workload's CustomResourceDefinition.
var WidgetsGVR = schema.GroupVersionResource{Group: "workload.peerdiscovery.test", Version: "v1", Resource: "widgets"}

// NamespacesGVR is the namespaces resource (the namespace lifecycle's).
var NamespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// The kinds.
var (
	ConfigMaps = Kind{Name: "configmaps", GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true,
		object: func() map[string]any {
			return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "v"}}
		}}
	// Deployments have no replicas; the kube-controller-manager's
	// deployment controller still gives each a ReplicaSet and a status.
	Deployments = Kind{Name: "deployments", GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespaced: true,
		object: func() map[string]any {
			labels := map[string]any{"app": "workload"}
			return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": map[string]any{
				"replicas": int64(0),
				"selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{
					"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}}}},
			}}
		}}
	Widgets = Kind{Name: "widgets", GVR: WidgetsGVR, Namespaced: true,
		object: func() map[string]any {
			return map[string]any{"apiVersion": WidgetsGVR.GroupVersion().String(), "kind": "Widget", "spec": map[string]any{"size": int64(1)}}
		}}
	// StorageVersionMigrations are served by v1.37 only (cluster-wide).
	StorageVersionMigrations = Kind{Name: "storageversionmigrations", GVR: schema.GroupVersionResource{Group: "storagemigration.k8s.io", Version: "v1", Resource: "storageversionmigrations"},
		object: func() map[string]any {
			return map[string]any{"apiVersion": "storagemigration.k8s.io/v1", "kind": "StorageVersionMigration",
				"spec": map[string]any{"resource": map[string]any{"group": "", "resource": "configmaps"}}}
		}}
	// PodDisruptionBudgets are namespaced; a plane that turns policy/v1
	// off on its older servers has them served by the newer ones only.
	PodDisruptionBudgets = Kind{Name: "poddisruptionbudgets", GVR: schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, Namespaced: true,
		object: func() map[string]any {
			return map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "spec": map[string]any{
				"minAvailable": int64(1), "selector": map[string]any{"matchLabels": map[string]any{"app": "workload"}}}}
		}}
)

// NewObject is k's object for create operation op of run, in namespace
// ns when k is namespaced.
func (k Kind) NewObject(run, ns string, op int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: k.object()}
	u.SetGenerateName("w-")
	if k.Namespaced {
		u.SetNamespace(ns)
	}
	u.SetLabels(map[string]string{RunLabel: run, OpLabel: strconv.FormatInt(op, 10)})
	return u
}

func (k Kind) String() string { return fmt.Sprintf("%s (%s)", k.Name, k.GVR.GroupVersion()) }

// WidgetsCRD is the workload's CustomResourceDefinition.
func WidgetsCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": WidgetsGVR.Resource + "." + WidgetsGVR.Group},
		"spec": map[string]any{
			"group": WidgetsGVR.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}
