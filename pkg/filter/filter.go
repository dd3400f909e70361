// Package filter is the peerdiscovery request filter that runs inside every
// kube-apiserver. It must compile against k8s.io/* v0.36.x and v0.37.x, so it
// imports no generated clientset or informers (see docs/design.md).
package filter

import (
	"net/http"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
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
}

// Filter is one kube-apiserver's peer routing filter.
type Filter struct {
	opts Options
}

// New validates the options and builds a filter.
func New(opts Options) (*Filter, error) {
	return &Filter{opts: opts}, nil
}

// WrapHandler wraps the innermost handler of the aggregator chain, exactly
// where upstream wraps its peer proxy. c is the aggregator's generic config.
func (f *Filter) WrapHandler(h http.Handler, c *genericapiserver.Config) http.Handler {
	return h
}

// PostStartHook starts the filter's caches and registration.
func (f *Filter) PostStartHook(ctx genericapiserver.PostStartHookContext) error {
	return nil
}

// ReadyzCheck reports whether the filter's caches are synced.
func (f *Filter) ReadyzCheck() healthz.HealthChecker {
	return healthz.NamedCheck("peerdiscovery-filter", func(*http.Request) error { return nil })
}
