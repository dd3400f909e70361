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

package workload

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// SetUp creates the namespace and the workload's CRD through the first
// server, and waits until every server (configs[i] is server i's) serves
// the CRD and has written one Widget. A server's first writes of a new
// CRD's objects wait 2 s in kube-apiserver (until its ResourceQuota
// admission has an evaluator for the resource: "quota admission added
// evaluator" in its log), with either routing; made here, that wait is not
// counted as a workload operation's.
func SetUp(ctx context.Context, configs []*rest.Config, ns string) error {
	admin, err := dynamic.NewForConfig(configs[0])
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if _, err := admin.Resource(NamespacesGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := admin.Resource(crds).Create(ctx, WidgetsCRD(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for i, cfg := range configs {
		client, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := client.Resource(WidgetsGVR).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("kube-apiserver %d does not serve %s: %w", i, WidgetsGVR, err)
		}
		w := &unstructured.Unstructured{Object: Widgets.object()}
		w.SetGenerateName("setup-")
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			created, err := client.Resource(WidgetsGVR).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
			if err != nil {
				return false, nil
			}
			return true, client.Resource(WidgetsGVR).Namespace(ns).Delete(ctx, created.GetName(), metav1.DeleteOptions{})
		})
		if err != nil {
			return fmt.Errorf("kube-apiserver %d does not write %s: %w", i, WidgetsGVR, err)
		}
	}
	return nil
}
