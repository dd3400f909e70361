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

package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
	"sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery/fieldselector"
)

// Field selectors the server supports beyond metadata.name. They are the
// questions asked at 3 a.m.: "what is not served everywhere?", "which peers
// are not ready?".
var (
	// PeerRoutingTableFields are the selectable fields of PeerRoutingTable.
	PeerRoutingTableFields = fieldselector.Table[peerdiscovery.PeerRoutingTable]{
		"metadata.name":      func(t *peerdiscovery.PeerRoutingTable) string { return t.Name },
		"spec.group":         func(t *peerdiscovery.PeerRoutingTable) string { return t.Spec.Group },
		"spec.version":       func(t *peerdiscovery.PeerRoutingTable) string { return t.Spec.Version },
		"spec.resource":      func(t *peerdiscovery.PeerRoutingTable) string { return t.Spec.Resource },
		"spec.scope":         func(t *peerdiscovery.PeerRoutingTable) string { return string(t.Spec.Scope) },
		"status.servedByAll": func(t *peerdiscovery.PeerRoutingTable) string { return strconv.FormatBool(t.Status.ServedByAll) },
		"status.clusterWide": func(t *peerdiscovery.PeerRoutingTable) string { return strconv.FormatBool(t.Status.ClusterWide) },
	}
	// APIServerPeerFields are the selectable fields of APIServerPeer.
	APIServerPeerFields = fieldselector.Table[peerdiscovery.APIServerPeer]{
		"metadata.name":      func(p *peerdiscovery.APIServerPeer) string { return p.Name },
		"spec.serverID":      func(p *peerdiscovery.APIServerPeer) string { return p.Spec.ServerID },
		"spec.binaryVersion": func(p *peerdiscovery.APIServerPeer) string { return p.Spec.BinaryVersion },
		"status.ready": func(p *peerdiscovery.APIServerPeer) string {
			return strconv.FormatBool(PeerStatusReady(p.Status.Conditions, p.Status.LeftTime))
		},
	}
	// PeerAggregatedDiscoveryFields are the selectable fields of
	// PeerAggregatedDiscovery.
	PeerAggregatedDiscoveryFields = fieldselector.Table[peerdiscovery.PeerAggregatedDiscovery]{
		"metadata.name": func(d *peerdiscovery.PeerAggregatedDiscovery) string { return d.Name },
	}
)

func init() {
	localSchemeBuilder.Register(addFieldLabelConversions)
}

func addFieldLabelConversions(scheme *runtime.Scheme) error {
	for kind, labels := range map[string][]string{
		"PeerRoutingTable":        PeerRoutingTableFields.Labels(),
		"APIServerPeer":           APIServerPeerFields.Labels(),
		"PeerAggregatedDiscovery": PeerAggregatedDiscoveryFields.Labels(),
	} {
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind),
			func(label, value string) (string, string, error) {
				if slices.Contains(labels, label) {
					return label, value, nil
				}
				return "", "", fmt.Errorf("field label not supported: %s", label)
			})
		if err != nil {
			return err
		}
	}
	return nil
}
