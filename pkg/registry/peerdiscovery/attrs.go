package peerdiscovery

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	api "sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery"
)

// The field sets below must list exactly the labels accepted by the field
// label conversions in pkg/apis/peerdiscovery/v1alpha1/fields.go.

func routingTableAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	t, ok := obj.(*api.PeerRoutingTable)
	if !ok {
		return nil, nil, fmt.Errorf("not a PeerRoutingTable: %T", obj)
	}
	return t.Labels, fields.Set{
		"metadata.name":      t.Name,
		"spec.group":         t.Spec.Group,
		"spec.version":       t.Spec.Version,
		"spec.resource":      t.Spec.Resource,
		"spec.scope":         string(t.Spec.Scope),
		"status.servedByAll": strconv.FormatBool(t.Status.ServedByAll),
		"status.clusterWide": strconv.FormatBool(t.Status.ClusterWide),
	}, nil
}

func peerAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	p, ok := obj.(*api.APIServerPeer)
	if !ok {
		return nil, nil, fmt.Errorf("not an APIServerPeer: %T", obj)
	}
	return p.Labels, fields.Set{
		"metadata.name":      p.Name,
		"spec.serverID":      p.Spec.ServerID,
		"spec.binaryVersion": p.Spec.BinaryVersion,
		"status.ready":       strconv.FormatBool(PeerReady(p)),
	}, nil
}

func nameOnlyAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, err
	}
	return m.GetLabels(), fields.Set{"metadata.name": m.GetName()}, nil
}

// PeerReady reports whether the peer's Ready condition is True.
func PeerReady(p *api.APIServerPeer) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == api.ConditionReady {
			return c.Status == "True"
		}
	}
	return false
}

// PeerRoutable reports whether requests may be proxied to the peer: ready
// and not departed (the rule routing.PeerFromObject applies).
func PeerRoutable(p *api.APIServerPeer) bool {
	return PeerReady(p) && p.Status.LeftTime == nil
}
