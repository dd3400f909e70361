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

// Package peerlease owns the format of the Leases peers are learned from:
// the registration Lease the filter publishes on every kube-apiserver that
// carries it, and upstream's kube-apiserver identity Lease. The engine reads
// both; the filter writes the registration Lease. The filter imports it, so
// it must compile against the k8s.io libraries of every supported release
// (hack/verify-filter-builds.sh).
package peerlease

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// Namespace holds every Lease of this package, as upstream's identity Leases.
	Namespace = metav1.NamespaceSystem

	// RegistrationLabel marks registration Leases; its value is the component.
	RegistrationLabel = "peerdiscovery.k8s.io/registration"
	// RegistrationComponent is RegistrationLabel's value for kube-apiservers.
	RegistrationComponent = "kube-apiserver"
	// EndpointAnnotation is the host:port peers use to reach the server.
	EndpointAnnotation = "peerdiscovery.k8s.io/endpoint"
	// BinaryVersionAnnotation is the server's gitVersion.
	BinaryVersionAnnotation = "peerdiscovery.k8s.io/binary-version"
	// NamePrefix starts every registration Lease name.
	NamePrefix = "peerdiscovery-"

	// DefaultDurationSeconds is short so that a dead server is noticed in
	// seconds (upstream's peer endpoint leases live 15 s too); the filter
	// renews every DefaultRenewInterval, three times per duration.
	DefaultDurationSeconds = 15
	// DefaultRenewInterval is how often the filter renews its Lease. Every
	// renewal is an etcd write and a watch event that every kube-apiserver's
	// watch cache decodes: at 5 s, with only renewTime in the managed
	// fields, the servers' renewals cost etcd at most twice what upstream's
	// identity Leases do (renewed every 10 s); a failed renewal is retried
	// after RenewRetryInterval, so a server back from a partition is not
	// kept waiting for the next one.
	DefaultRenewInterval = 5 * time.Second
	// RenewRetryInterval is how soon a failed renewal is tried again.
	RenewRetryInterval = time.Second

	// IdentityLabel is upstream's identity Lease label
	// (k8s.io/kubernetes/pkg/controlplane/apiserver.IdentityLeaseComponentLabelKey).
	IdentityLabel = "apiserver.kubernetes.io/identity"
	// IdentityComponent is IdentityLabel's value for kube-apiservers.
	IdentityComponent = "kube-apiserver"
	// PeerAdvertiseAddressAnnotation is set by upstream on identity Leases
	// when its UnknownVersionInteroperabilityProxy gate is on.
	PeerAdvertiseAddressAnnotation = "kubernetes.io/peer-advertise-address"
)

// Registration is what one Lease says about one kube-apiserver.
type Registration struct {
	ServerID      string
	Endpoint      string
	BinaryVersion string
	// AcquireTime is when the holder took the Lease (its creation time when
	// unset): of two identities at one endpoint, the later one is the
	// server there now.
	AcquireTime time.Time
	// RenewTime is the last renewal; Expires is when it lapses.
	RenewTime time.Time
	Expires   time.Time
	// DepartedAt is when the server recorded a graceful shutdown; zero
	// while it runs (registration Leases only).
	DepartedAt time.Time
	// Served is what the server serves itself, as its filter last recorded
	// it: from its first renewal after it read its own discovery, kept
	// current while it runs, and left in place when it departs or crashes.
	// nil when the Lease does not say (registration Leases only).
	Served []ServedResource
	// ETags are the discovery ETags recorded with Served; only a
	// served-record Lease has them, joined in by the reader.
	ETags DiscoveryETags
}

// Departed tells whether the server recorded its graceful shutdown.
func (r Registration) Departed() bool { return !r.DepartedAt.IsZero() }

// Live tells whether the Lease says its server runs at now.
func (r Registration) Live(now time.Time) bool { return !r.Departed() && !now.After(r.Expires) }

// GoneAt is when the Lease stopped (or will stop) counting as live: the
// departure or the lapse, whichever comes first. Every reader computes the
// same time from the same Lease.
func (r Registration) GoneAt() time.Time { return goneAt(r.DepartedAt, r.Expires) }

// LeaseName is the registration Lease name of a server.
func LeaseName(serverID string) string { return NamePrefix + serverID }

// NewRegistrationLease builds (or renews, given the existing one) a
// registration Lease. served is EncodeServed's encoding of what the server
// serves itself now, for a Lease that carries its record (before the
// served-record Lease, servedlease.go); empty keeps what the Lease
// carries (DropServed drops it). A departure recorded in the
// existing Lease is dropped: the server (back under the same ID) runs
// again.
func NewRegistrationLease(existing *coordinationv1.Lease, serverID, endpoint, binaryVersion, served string, now time.Time) *coordinationv1.Lease {
	l := ownLease(existing, LeaseName(serverID), RegistrationComponent)
	l.Annotations[EndpointAnnotation] = endpoint
	l.Annotations[BinaryVersionAnnotation] = binaryVersion
	// Back after a departure or a lapse: a new holding, so the identity
	// counts as newer than any other that claimed its endpoint meanwhile.
	if existing != nil {
		if _, departed := existing.Annotations[DepartedAtAnnotation]; departed {
			l.Spec.AcquireTime = nil
		} else if _, expires := lapse(existing, 0); now.After(expires) {
			l.Spec.AcquireTime = nil
		}
	}
	delete(l.Annotations, DepartedAtAnnotation)
	if served != "" {
		l.Annotations[ServedResourcesAnnotation] = served
	}
	holder := serverID
	duration := int32(DefaultDurationSeconds)
	renew := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &duration
	l.Spec.RenewTime = &renew
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &renew
	}
	return l
}

// ownLease is a copy of existing (or a new Lease) named name in Namespace,
// labelled as component, with labels and annotations to write to.
func ownLease(existing *coordinationv1.Lease, name, component string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if existing != nil {
		l = existing.DeepCopy()
	}
	l.Name, l.Namespace = name, Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[RegistrationLabel] = component
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	return l
}

// DropServed removes the served record a registration Lease carries
// itself, once the served-record Lease holds it; it returns l.
func DropServed(l *coordinationv1.Lease) *coordinationv1.Lease {
	delete(l.Annotations, ServedResourcesAnnotation)
	return l
}

// IsRegistration tells whether a Lease is a registration Lease.
func IsRegistration(l *coordinationv1.Lease) bool {
	return l.Namespace == Namespace && l.Labels[RegistrationLabel] == RegistrationComponent
}

// IsIdentity tells whether a Lease is an upstream kube-apiserver identity Lease.
func IsIdentity(l *coordinationv1.Lease) bool {
	return l.Namespace == Namespace && l.Labels[IdentityLabel] == IdentityComponent
}

// ParseRegistration reads a registration Lease. A broken one is an error,
// never a guessed peer.
func ParseRegistration(l *coordinationv1.Lease) (Registration, error) {
	return parseRegistration(l, true)
}

// ParseRegistrationSkippingServed is ParseRegistration for a reader that
// holds what the Lease's served-resources record decodes to (it compared
// the annotation with the one it decoded): Served is left nil. A renewal
// rewrites the Lease every DefaultRenewInterval, rarely its record, which
// lists thousands of resources at scale.
func ParseRegistrationSkippingServed(l *coordinationv1.Lease) (Registration, error) {
	return parseRegistration(l, false)
}

func parseRegistration(l *coordinationv1.Lease, decodeServed bool) (Registration, error) {
	if !IsRegistration(l) {
		return Registration{}, fmt.Errorf("lease %s/%s is not a registration lease", l.Namespace, l.Name)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return Registration{}, fmt.Errorf("lease %s/%s: no holderIdentity", l.Namespace, l.Name)
	}
	id := *l.Spec.HolderIdentity
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return Registration{}, fmt.Errorf("lease %s/%s: holderIdentity %q: %s", l.Namespace, l.Name, id, strings.Join(errs, "; "))
	}
	if l.Name != LeaseName(id) {
		return Registration{}, fmt.Errorf("lease %s/%s: name does not match holderIdentity %q", l.Namespace, l.Name, id)
	}
	endpoint, err := ValidateEndpoint(l.Annotations[EndpointAnnotation])
	if err != nil {
		return Registration{}, fmt.Errorf("lease %s/%s: annotation %s: %w", l.Namespace, l.Name, EndpointAnnotation, err)
	}
	departed, err := parseDeparted(l)
	if err != nil {
		return Registration{}, fmt.Errorf("lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	var served []ServedResource
	if decodeServed {
		if served, err = parseServed(l); err != nil {
			return Registration{}, fmt.Errorf("lease %s/%s: %w", l.Namespace, l.Name, err)
		}
	}
	r := Registration{ServerID: id, Endpoint: endpoint, BinaryVersion: l.Annotations[BinaryVersionAnnotation], DepartedAt: departed, Served: served}
	r.AcquireTime = acquired(l)
	r.RenewTime, r.Expires = lapse(l, 0)
	return r, nil
}

// ParseIdentity reads an upstream identity Lease. Its peer address is only
// there when upstream's proxy gate is on; without it the peer has no
// endpoint and the error says so. Identity Leases last an hour, so
// staleAfter (since the last renewal, every 10s upstream) decides when the
// server is gone.
func ParseIdentity(l *coordinationv1.Lease, staleAfter time.Duration) (Registration, error) {
	if !IsIdentity(l) {
		return Registration{}, fmt.Errorf("lease %s/%s is not an identity lease", l.Namespace, l.Name)
	}
	// Upstream: name = server ID, holder = ID + "_" + uuid.
	id := l.Name
	raw, ok := l.Annotations[PeerAdvertiseAddressAnnotation]
	if !ok {
		return Registration{}, fmt.Errorf("lease %s/%s: no %s annotation", l.Namespace, l.Name, PeerAdvertiseAddressAnnotation)
	}
	endpoint, err := ValidateEndpoint(raw)
	if err != nil {
		return Registration{}, fmt.Errorf("lease %s/%s: annotation %s: %w", l.Namespace, l.Name, PeerAdvertiseAddressAnnotation, err)
	}
	r := Registration{ServerID: id, Endpoint: endpoint}
	r.AcquireTime = acquired(l)
	r.RenewTime, r.Expires = lapse(l, staleAfter)
	return r, nil
}

// acquired is the Lease's acquireTime, or its creation time without one
// (upstream's identity Leases set none).
func acquired(l *coordinationv1.Lease) time.Time {
	if l.Spec.AcquireTime != nil {
		return l.Spec.AcquireTime.Time
	}
	return l.CreationTimestamp.Time
}

// lapse returns the renewal time and when the lease lapses: renewal plus
// the lease duration, or plus staleAfter when that is set and shorter.
func lapse(l *coordinationv1.Lease, staleAfter time.Duration) (time.Time, time.Time) {
	var renew time.Time
	switch {
	case l.Spec.RenewTime != nil:
		renew = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		renew = l.Spec.AcquireTime.Time
	default:
		renew = l.CreationTimestamp.Time
	}
	d := time.Duration(DefaultDurationSeconds) * time.Second
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if staleAfter > 0 && staleAfter < d {
		d = staleAfter
	}
	return renew, renew.Add(d)
}

// ValidateEndpoint checks a host:port (an IP or DNS name and a port 1-65535)
// and returns it normalised.
func ValidateEndpoint(ep string) (string, error) {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port: %w", ep, err)
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host", ep)
	}
	if ip := net.ParseIP(host); ip != nil {
		// Canonical form, so that the same address written two ways (an
		// IPv6 address with leading zeros, an IPv4-mapped IPv6 address)
		// matches the EndpointSlice addresses it is compared with.
		host = ip.String()
	} else if errs := validation.IsDNS1123Subdomain(host); len(errs) > 0 {
		return "", fmt.Errorf("%q: host is neither an IP nor a DNS name", ep)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || port[0] < '0' || port[0] > '9' {
		return "", fmt.Errorf("%q: port must be 1-65535", ep)
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}
