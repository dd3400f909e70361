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

package peerlease

import (
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The served record has a Lease of its own, written only when the record
// changes, before the registration Lease renewal that follows: a renewal,
// every DefaultRenewInterval by every server, is an etcd write and a watch
// event that every kube-apiserver's watch cache decodes, and it now carries
// only the liveness (about 0.5 KB, as an identity Lease) rather than a
// record of thousands of resources. The record stays when its server
// departs or crashes, as before; readers join it to the registration by
// server ID. A registration Lease that still carries the record itself (a
// filter from before the split) is read as before.
const (
	// ServedComponent is RegistrationLabel's value on a served record's
	// Lease: the same label, so that one watch reads both kinds.
	ServedComponent = "served-resources"
	// ServedNamePrefix starts a served record's Lease name. No
	// registration Lease name (NamePrefix, then a DNS subdomain) can
	// equal one: the "." comes where those have their "-".
	ServedNamePrefix = "peerdiscovery.served-"
)

// ComponentSelector selects both registration and served-record Leases.
var ComponentSelector = fmt.Sprintf("%s in (%s,%s)", RegistrationLabel, RegistrationComponent, ServedComponent)

// ServedLeaseName is the name of a server's served-record Lease.
func ServedLeaseName(serverID string) string { return ServedNamePrefix + serverID }

// NewServedLease builds (or updates, given the existing one) a server's
// served-record Lease holding served (EncodeServed's encoding). It is
// never renewed: no renewTime, no duration.
func NewServedLease(existing *coordinationv1.Lease, serverID, served string) *coordinationv1.Lease {
	l := ownLease(existing, ServedLeaseName(serverID), ServedComponent)
	l.Annotations[ServedResourcesAnnotation] = served
	holder := serverID
	l.Spec.HolderIdentity = &holder
	return l
}

// IsServedRecord tells whether a Lease is a served-record Lease.
func IsServedRecord(l *coordinationv1.Lease) bool {
	return l.Namespace == Namespace && l.Labels[RegistrationLabel] == ServedComponent
}

// ServedRecord is what a served-record Lease says.
type ServedRecord struct {
	ServerID string
	Served   []ServedResource
}

// ParseServedRecord reads a served-record Lease. A broken one is an error.
func ParseServedRecord(l *coordinationv1.Lease) (ServedRecord, error) {
	id, raw, err := servedRecordIdentity(l)
	if err != nil {
		return ServedRecord{}, err
	}
	served, err := DecodeServed(raw)
	if err != nil {
		return ServedRecord{}, fmt.Errorf("lease %s/%s: annotation %s: %w", l.Namespace, l.Name, ServedResourcesAnnotation, err)
	}
	return ServedRecord{ServerID: id, Served: served}, nil
}

// servedRecordIdentity checks what a served-record Lease says besides its
// record, and returns its server ID and the record as written.
func servedRecordIdentity(l *coordinationv1.Lease) (id, raw string, err error) {
	if !IsServedRecord(l) {
		return "", "", fmt.Errorf("lease %s/%s is not a served-record lease", l.Namespace, l.Name)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", "", fmt.Errorf("lease %s/%s: no holderIdentity", l.Namespace, l.Name)
	}
	id = *l.Spec.HolderIdentity
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return "", "", fmt.Errorf("lease %s/%s: holderIdentity %q: %s", l.Namespace, l.Name, id, strings.Join(errs, "; "))
	}
	if l.Name != ServedLeaseName(id) {
		return "", "", fmt.Errorf("lease %s/%s: name does not match holderIdentity %q", l.Namespace, l.Name, id)
	}
	raw, ok := l.Annotations[ServedResourcesAnnotation]
	if !ok {
		return "", "", fmt.Errorf("lease %s/%s: no annotation %s", l.Namespace, l.Name, ServedResourcesAnnotation)
	}
	return id, raw, nil
}
