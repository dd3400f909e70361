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

package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// crd is the i-th CRD: one version, cluster-scoped, no schema beyond
// "keep every field" (the cheapest CRD a server can serve), perGroup to a
// group.
func crd(i int) *apiextensionsv1.CustomResourceDefinition {
	plural, kind := fmt.Sprintf("widgets%05d", i), fmt.Sprintf("Widget%05d", i)
	group := fmt.Sprintf("c%03d.%s", i/perGroup, crdSuffix)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: fmt.Sprintf("widget%05d", i), Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
}

// crdBatch is how many CRDs go to one plane before the other's turn.
const crdBatch = 50

// CreateCRDs creates up to want CRDs on every plane, a batch at a time on
// each in turn, and stops early when the host's available memory falls
// under the scale's reserve or the time bound passes. It returns how many
// every plane has and, when fewer than want, why.
func CreateCRDs(ctx context.Context, planes []*Plane, s Scale, bound time.Duration, logf func(string, ...any)) (int, string, error) {
	deadline := time.Now().Add(bound)
	var clients []apiextensionsclient.Interface
	for _, pl := range planes {
		c, err := apiextensionsclient.NewForConfig(pl.C.AdminConfig(pl.serverOf(NewVersion)))
		if err != nil {
			return 0, "", err
		}
		clients = append(clients, c)
	}
	made := 0
	for made < s.CostCRDs {
		if avail, err := memAvailable(); err == nil && avail < s.CostMemoryReserve {
			return made, fmt.Sprintf("stopped at %d CRDs: the host had %.1f GiB available, under the %.1f GiB reserve", made, float64(avail)/(1<<30), float64(s.CostMemoryReserve)/(1<<30)), nil
		}
		if time.Now().After(deadline) {
			return made, fmt.Sprintf("stopped at %d CRDs: creating them took longer than %s", made, bound), nil
		}
		n := min(crdBatch, s.CostCRDs-made)
		for _, c := range clients {
			var wg sync.WaitGroup
			errs := make([]error, n)
			for j := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd(made+j), metav1.CreateOptions{})
					if apierrors.IsAlreadyExists(err) {
						err = nil
					}
					errs[j] = err
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return made, "", err
				}
			}
		}
		made += n
		if made%500 == 0 || made == s.CostCRDs {
			logf("%d CRDs created on each plane", made)
		}
	}
	return made, "", nil
}

// WaitGVRsServed waits until every kube-apiserver of every plane lists n
// resources in the groups ending with suffix.
func WaitGVRsServed(ctx context.Context, planes []*Plane, suffix string, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for _, pl := range planes {
		for i, srv := range pl.C.Servers() {
			for {
				got, err := countGVRs(ctx, pl.C.AdminConfig(i), suffix)
				if err == nil && got == n {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s %s lists %d of %d resources of *.%s after %s (last error: %v)", pl.Routing, srv.Name, got, n, suffix, bound, err)
				}
				time.Sleep(2 * time.Second)
			}
		}
	}
	return nil
}
