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

	// DiscoveryETagsAnnotation holds the ETags of the server's own /api
	// and /apis (profile=nopeer) as its filter last read them, "<api>
	// <apis>". The served list leaves out what every server serves alike
	// (CRDs, aggregated APIs) and what routing does not need (short names,
	// categories), so a change there shows only in these ETags: a reader
	// that holds other ETags for the server reads its discovery again,
	// and needs no frequent safety poll of its own.
	DiscoveryETagsAnnotation = "peerdiscovery.k8s.io/discovery-etags"

	// maxETagBytes bounds one recorded ETag (kube-apiserver's are a
	// quoted SHA-512 in hex: 130 bytes).
	maxETagBytes = 256
)

// DiscoveryETags are the ETags of a server's own /api and /apis.
type DiscoveryETags struct{ API, APIs string }

// IsZero tells whether no ETags are recorded.
func (t DiscoveryETags) IsZero() bool { return t == DiscoveryETags{} }

// annotation is DiscoveryETagsAnnotation's value for t.
func (t DiscoveryETags) annotation() string { return t.API + " " + t.APIs }

// ServedContent is what a served-record Lease holds: EncodeServed's list
// and, when known, the discovery ETags it was read with.
type ServedContent struct {
	Served string
	ETags  DiscoveryETags
}

// Holds tells whether the served-record Lease l holds c.
func (c ServedContent) Holds(l *coordinationv1.Lease) bool {
	raw, ok := l.Annotations[DiscoveryETagsAnnotation]
	return l.Annotations[ServedResourcesAnnotation] == c.Served && ok == !c.ETags.IsZero() && (!ok || raw == c.ETags.annotation())
}

// ComponentSelector selects both registration and served-record Leases.
var ComponentSelector = fmt.Sprintf("%s in (%s,%s)", RegistrationLabel, RegistrationComponent, ServedComponent)

// ServedLeaseName is the name of a server's served-record Lease.
func ServedLeaseName(serverID string) string { return ServedNamePrefix + serverID }

// NewServedLease builds (or updates, given the existing one) a server's
// served-record Lease holding c. It is never renewed: no renewTime, no
// duration.
func NewServedLease(existing *coordinationv1.Lease, serverID string, c ServedContent) *coordinationv1.Lease {
	l := ownLease(existing, ServedLeaseName(serverID), ServedComponent)
	l.Annotations[ServedResourcesAnnotation] = c.Served
	if c.ETags.IsZero() {
		delete(l.Annotations, DiscoveryETagsAnnotation)
	} else {
		l.Annotations[DiscoveryETagsAnnotation] = c.ETags.annotation()
	}
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
	// ETags are zero when the record has none (a filter from before them).
	ETags DiscoveryETags
}

// ParseServedRecord reads a served-record Lease. A broken one is an error.
func ParseServedRecord(l *coordinationv1.Lease) (ServedRecord, error) {
	id, raw, etags, err := servedRecordIdentity(l)
	if err != nil {
		return ServedRecord{}, err
	}
	served, err := DecodeServed(raw)
	if err != nil {
		return ServedRecord{}, fmt.Errorf("lease %s/%s: annotation %s: %w", l.Namespace, l.Name, ServedResourcesAnnotation, err)
	}
	return ServedRecord{ServerID: id, Served: served, ETags: etags}, nil
}

// servedRecordIdentity checks what a served-record Lease says besides its
// list, and returns its server ID, the list as written and its ETags.
func servedRecordIdentity(l *coordinationv1.Lease) (id, raw string, etags DiscoveryETags, err error) {
	fail := func(format string, a ...any) (string, string, DiscoveryETags, error) {
		return "", "", DiscoveryETags{}, fmt.Errorf("lease %s/%s: %s", l.Namespace, l.Name, fmt.Sprintf(format, a...))
	}
	if !IsServedRecord(l) {
		return fail("not a served-record lease")
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return fail("no holderIdentity")
	}
	id = *l.Spec.HolderIdentity
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return fail("holderIdentity %q: %s", id, strings.Join(errs, "; "))
	}
	if l.Name != ServedLeaseName(id) {
		return fail("name does not match holderIdentity %q", id)
	}
	raw, ok := l.Annotations[ServedResourcesAnnotation]
	if !ok {
		return fail("no annotation %s", ServedResourcesAnnotation)
	}
	if etags, err = parseDiscoveryETags(l.Annotations); err != nil {
		return fail("annotation %s: %v", DiscoveryETagsAnnotation, err)
	}
	return id, raw, etags, nil
}

// parseDiscoveryETags reads DiscoveryETagsAnnotation: absent is none.
func parseDiscoveryETags(annotations map[string]string) (DiscoveryETags, error) {
	raw, ok := annotations[DiscoveryETagsAnnotation]
	if !ok {
		return DiscoveryETags{}, nil
	}
	api, apis, found := strings.Cut(raw, " ")
	if !found {
		return DiscoveryETags{}, fmt.Errorf("want two ETags separated by a space")
	}
	for _, tag := range []string{api, apis} {
		if tag == "" || len(tag) > maxETagBytes {
			return DiscoveryETags{}, fmt.Errorf("an ETag of %d bytes, want 1 to %d", len(tag), maxETagBytes)
		}
		for i := 0; i < len(tag); i++ {
			// An entity tag is visible ASCII (RFC 9110); a space would be a
			// third field.
			if tag[i] < 0x21 || tag[i] > 0x7e {
				return DiscoveryETags{}, fmt.Errorf("byte %#x in an ETag, want visible ASCII", tag[i])
			}
		}
	}
	return DiscoveryETags{API: api, APIs: apis}, nil
}
