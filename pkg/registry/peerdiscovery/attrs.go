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
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/fieldselector"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/v1alpha1"
)

// The attribute functions build field sets from the same tables as the
// field label conversions, so a selector the API accepts always matches.
var (
	routingTableAttrs = attrsFrom(v1alpha1.PeerRoutingTableFields)
	peerAttrs         = attrsFrom(v1alpha1.APIServerPeerFields)
	nameOnlyAttrs     = attrsFrom(v1alpha1.PeerAggregatedDiscoveryFields)
)

// attrsFrom is the storage attribute function of the internal kind T.
func attrsFrom[T any, P interface {
	*T
	metav1.Object
}](selectable fieldselector.Table[T]) func(runtime.Object) (labels.Set, fields.Set, error) {
	return func(obj runtime.Object) (labels.Set, fields.Set, error) {
		o, ok := obj.(P)
		if !ok {
			return nil, nil, fmt.Errorf("not a %T: %T", P(nil), obj)
		}
		return o.GetLabels(), selectable.Set((*T)(o)), nil
	}
}
