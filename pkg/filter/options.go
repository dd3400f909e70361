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
	"os"
	"strconv"
	"time"

	"sigs.k8s.io/peerdiscovery/pkg/filter/proxy"
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
	LocalRefreshInterval time.Duration // local discovery re-read (0: see Filter.localRefreshInterval)
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
	// PeerHTTP2 is how connections to peers use HTTP/2; nil: HTTP/2 with
	// the peers' health check (DefaultPeerHTTP2). kube-apiserver's wrapper
	// sets PeerHTTP2FromEnvironment().
	PeerHTTP2 *PeerHTTP2
}

// PeerHTTP2 is how connections to peers use HTTP/2.
type PeerHTTP2 = proxy.HTTP2

// DefaultPeerHTTP2 is HTTP/2 with a health check shorter than client-go's
// 30 s + 15 s: a frozen or cut-off peer fails the requests on its
// connection within 8 s of the last frame it sent, so no request waits on
// it much longer than the view takes to notice (goal: 10 s). A ping every
// 5 s on an idle connection costs nothing measurable; kube-apiserver
// answers pings from its connection's read loop, within milliseconds even
// when busy.
var DefaultPeerHTTP2 = PeerHTTP2{ReadIdleTimeout: 5 * time.Second, PingTimeout: 3 * time.Second}

// PeerHTTP2FromEnvironment is DefaultPeerHTTP2 changed by the variables
// every Kubernetes client honours (k8s.io/apimachinery's
// SetTransportDefaults reads them): DISABLE_HTTP2,
// HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS. The
// filter builds its own transports, so it reads them here, once, where
// kube-apiserver's wrapper asks for them: operators tune every client of
// the process the same way (docs/operations.md).
func PeerHTTP2FromEnvironment() PeerHTTP2 {
	return PeerHTTP2{
		Disabled:        os.Getenv("DISABLE_HTTP2") != "",
		ReadIdleTimeout: envSeconds("HTTP2_READ_IDLE_TIMEOUT_SECONDS", DefaultPeerHTTP2.ReadIdleTimeout),
		PingTimeout:     envSeconds("HTTP2_PING_TIMEOUT_SECONDS", DefaultPeerHTTP2.PingTimeout),
	}
}

// envSeconds reads a number of seconds from the environment, def when it
// is unset or not a number (0 turns the health check off, as in
// apimachinery).
func envSeconds(name string, def time.Duration) time.Duration {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return time.Duration(v) * time.Second
	}
	return def
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
