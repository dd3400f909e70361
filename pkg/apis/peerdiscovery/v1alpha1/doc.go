// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=sigs.k8s.io/peerdiscovery/pkg/apis/peerdiscovery
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-model-package=io.k8s.peerdiscovery.v1alpha1
// +groupName=peerdiscovery.k8s.io

// Package v1alpha1 is version v1alpha1 of the peerdiscovery.k8s.io API:
// computed, read-only objects describing the kube-apiservers of a control
// plane and how requests are routed between them.
package v1alpha1
