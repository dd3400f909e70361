package engine

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
)

type (
	coordinationLease = coordinationv1.Lease
	apidiscoveryGroup = apidiscoveryv2.APIGroupDiscovery
)
