package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// Field selectors the server supports beyond metadata.name. They are the
// questions asked at 3 a.m.: "what is not served everywhere?", "which peers
// are not ready?".
var (
	// PeerRoutingTableFieldLabels are the selectable fields of PeerRoutingTable.
	PeerRoutingTableFieldLabels = []string{
		"metadata.name", "spec.group", "spec.version", "spec.resource", "spec.scope",
		"status.servedByAll", "status.clusterWide",
	}
	// APIServerPeerFieldLabels are the selectable fields of APIServerPeer.
	APIServerPeerFieldLabels = []string{
		"metadata.name", "spec.serverID", "spec.binaryVersion", "status.ready",
	}
)

func init() {
	localSchemeBuilder.Register(addFieldLabelConversions)
}

func addFieldLabelConversions(scheme *runtime.Scheme) error {
	for kind, labels := range map[string][]string{
		"PeerRoutingTable":        PeerRoutingTableFieldLabels,
		"APIServerPeer":           APIServerPeerFieldLabels,
		"PeerAggregatedDiscovery": {"metadata.name"},
	} {
		allowed := map[string]bool{}
		for _, l := range labels {
			allowed[l] = true
		}
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind),
			func(label, value string) (string, string, error) {
				if allowed[label] {
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
