// +k8s:deepcopy-gen=package
// +groupName=peerdiscovery.k8s.io

// Package peerdiscovery is the internal version of the peerdiscovery.k8s.io API.
package peerdiscovery
