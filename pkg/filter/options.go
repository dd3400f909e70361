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

package filter

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// Defaults of the registration Lease collection (Options).
const (
	// DefaultRegistrationLeaseRetention is peerdiscovery-apiserver's
	// default --tombstone-period.
	DefaultRegistrationLeaseRetention = 10 * time.Minute
	// DefaultRegistrationLeaseMaxRetention bounds how long a Lease stays
	// when peerdiscovery-apiserver is absent or out of reach.
	DefaultRegistrationLeaseMaxRetention = time.Hour
	// DefaultRegistrationLeaseGCInterval is about how often (jittered up
	// to twice as long) the filter looks for Leases to collect.
	DefaultRegistrationLeaseGCInterval = time.Minute
)

// Options carries what the filter takes from kube-apiserver's own flags.
// The flag names and meaning are upstream's (--peer-ca-file,
// --proxy-client-cert-file, --proxy-client-key-file, --peer-advertise-ip,
// --peer-advertise-port); the filter adds no flags of its own.
type Options struct {
	PeerCAFile          string
	ProxyClientCertFile string
	ProxyClientKeyFile  string
	PeerAdvertiseIP     string
	PeerAdvertisePort   string
	// AdvertiseAddress and SecurePort are the fallbacks when no peer
	// advertise address is set (--advertise-address, --secure-port).
	AdvertiseAddress string
	SecurePort       int

	// Tuning, defaulted by New; not flags.
	PeerServerName       string        // verified in peers' certificates
	LocalRefreshInterval time.Duration // local discovery re-read
	RetryAfterSeconds    int           // Retry-After on a 503 that the next seconds likely fix
	// SyncGracePeriod bounds, from the post-start hook, how long requests
	// for resources this server does not serve get 503 rather than the
	// local 404 while the routing caches are still empty (see handler).
	SyncGracePeriod time.Duration
	// PeerResponseHeaderTimeout bounds the wait for a peer's response
	// headers on requests that are not long-running. The default, 45s, is
	// the HTTP/2 health check's bound (ReadIdleTimeout 30s + PingTimeout
	// 15s) and under kube-apiserver's 60s request timeout, so a silent
	// peer is detected the same way over HTTP/1.1 and HTTP/2 and the client
	// still gets a clear 504 from this server.
	PeerResponseHeaderTimeout time.Duration
	// RegistrationLeaseRetention is how long at least a registration
	// Lease stays after its server departed or its Lease lapsed (default
	// 10m); then any kube-apiserver's filter deletes it as soon as
	// peerdiscovery-apiserver no longer lists the server, i.e. once its
	// tombstone ended. The Lease is where every replica, even one started
	// later, reads a gone server's tombstone from.
	RegistrationLeaseRetention time.Duration
	// RegistrationLeaseMaxRetention is how long a Lease stays at most
	// (default 1h), whatever the view says: peerdiscovery-apiserver may be
	// absent. It must exceed peerdiscovery-apiserver's --tombstone-period.
	RegistrationLeaseMaxRetention time.Duration
	// RegistrationLeaseGCInterval is about how often (jittered up to twice
	// as long) the filter looks for such Leases (default 1m).
	RegistrationLeaseGCInterval time.Duration
}

// Validate returns every problem with the options, each naming its flag.
// --peer-ca-file turns the filter on (as it turns on upstream's peer
// proxy); --proxy-client-cert-file alone does not: every kubeadm cluster
// sets it for the aggregator.
func (o *Options) Validate() []error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if o.ProxyClientCertFile == "" || o.ProxyClientKeyFile == "" {
		errs = append(errs, fmt.Errorf("--proxy-client-cert-file and --proxy-client-key-file are required to proxy to peers: they carry the user's identity"))
	}
	addressOK := true
	if o.PeerAdvertiseIP != "" && net.ParseIP(o.PeerAdvertiseIP) == nil {
		errs = append(errs, fmt.Errorf("--peer-advertise-ip %q is not an IP address", o.PeerAdvertiseIP))
		addressOK = false
	}
	if o.PeerAdvertisePort != "" {
		if p, err := strconv.Atoi(o.PeerAdvertisePort); err != nil || p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("--peer-advertise-port %q must be a port number 1-65535", o.PeerAdvertisePort))
			addressOK = false
		}
	}
	// The endpoint check would only repeat a bad flag's error.
	if addressOK {
		if _, err := o.endpoint(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Enabled reports whether peer proxying is configured at all.
func (o *Options) Enabled() bool { return o.PeerCAFile != "" }

// endpoint is the host:port peers use to reach this server: the peer
// advertise address, falling back to --advertise-address and --secure-port
// (upstream's rule).
func (o *Options) endpoint() (string, error) {
	ip := o.PeerAdvertiseIP
	if ip == "" {
		ip = o.AdvertiseAddress
	}
	port := o.PeerAdvertisePort
	if port == "" && o.SecurePort > 0 {
		port = strconv.Itoa(o.SecurePort)
	}
	if ip == "" || port == "" {
		return "", fmt.Errorf("no peer endpoint: set --peer-advertise-ip and --peer-advertise-port (or --advertise-address and --secure-port)")
	}
	if parsed := net.ParseIP(ip); parsed == nil || parsed.IsUnspecified() {
		return "", fmt.Errorf("peer endpoint IP %q must be a specific address (set --peer-advertise-ip)", ip)
	}
	return net.JoinHostPort(ip, port), nil
}
