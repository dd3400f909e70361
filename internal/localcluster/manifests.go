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

package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// What artifacts/deploy/base/ declares.
const (
	// APIServiceName is the APIService of peerdiscovery.k8s.io.
	APIServiceName = "v1alpha1.peerdiscovery.k8s.io"
	// APIGroupVersionPath is its discovery path.
	APIGroupVersionPath = "/apis/" + apiGroup + "/" + apiVersion
	apiGroup            = "peerdiscovery.k8s.io"
	apiVersion          = "v1alpha1"
	// ExtensionNamespace, ExtensionServiceAccount and ExtensionService
	// are where peerdiscovery-apiserver runs in a real cluster.
	ExtensionNamespace      = "peerdiscovery"
	ExtensionServiceAccount = "peerdiscovery-apiserver"
	ExtensionService        = "peerdiscovery-apiserver"
	// ExtensionEndpointSlice lists the local replicas' addresses: there is
	// no endpointslice controller (no kube-controller-manager) to do it.
	ExtensionEndpointSlice = "peerdiscovery-apiserver-local"

	fieldManager = "local-up"
	manifestDir  = "artifacts/deploy/base"
)

// manifestFiles are applied in this order; the APIService last, once the
// replicas serve.
var manifestFiles = []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "service.yaml", "apiservice.yaml"}

// readManifests decodes every YAML document of the deploy manifests.
func readManifests(dir string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, name := range manifestFiles {
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			js, err := utilyaml.ToJSON(doc)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			js = bytes.TrimSpace(js)
			if len(js) == 0 || string(js) == "null" {
				continue // comments only
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, u)
		}
		f.Close()
	}
	return out, nil
}

// apply server-side-applies objs through the dynamic client, retrying
// transient errors until ctx is done.
func apply(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		what := fmt.Sprintf("%s %s", gvk.Kind, o.GetName())
		if ns := o.GetNamespace(); ns != "" {
			what += " in " + ns
		}
		var lastErr error
		for attempt := 0; ; attempt++ {
			lastErr = func() error {
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					return err
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					ns := o.GetNamespace()
					if ns == "" {
						ns = metav1.NamespaceDefault
					}
					ri = dyn.Resource(m.Resource).Namespace(ns)
				}
				_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
				return err
			}()
			if lastErr == nil {
				break
			}
			if attempt >= 20 || ctx.Err() != nil {
				return fmt.Errorf("applying %s: %w", what, lastErr)
			}
			if rm, ok := mapper.(meta.ResettableRESTMapper); ok {
				rm.Reset()
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}
