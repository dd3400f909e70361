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

package server

import (
	"net/http"
	"os"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/transport"
)

// clientHealthCheck is the HTTP/2 connection health check of this
// process's clients: a ping after 5 s without a frame, the connection
// closed 3 s after an unanswered one. The engine's informers watch through
// one kube-apiserver at a time, and one that stops answering (frozen, cut
// off) would freeze its view of every peer for client-go's default
// 30 s + 15 s. With 5 s + 3 s a stuck connection is dropped, and the
// watches resume on another server, before a registration Lease (15 s) can
// seem to lapse.
var clientHealthCheck = http.HTTP2Config{SendPingTimeout: 5 * time.Second, PingTimeout: 3 * time.Second}

// healthCheckEnvironment are the variables by which every Kubernetes client
// reads its health check (k8s.io/apimachinery's SetTransportDefaults); when
// the environment sets one, it wins, as it does for other clients.
var healthCheckEnvironment = []string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS", "HTTP2_PING_TIMEOUT_SECONDS"}

// withHealthCheck returns a transport.WrapperFunc that gives the
// *http.Transport under a client-go client the health check h: x/net's
// HTTP/2 transport, which SetTransportDefaults configures, takes
// net/http's Transport.HTTP2 over the values it set from the environment.
// rest.Config has no field for it, and setting the environment instead
// would change it for the whole process.
//
// client-go shares one *http.Transport among the clients of equal TLS
// settings; it is set once, while the server's clients are built, before
// any of them sends a request, and a transport that already has a setting
// keeps it.
func withHealthCheck(h http.HTTP2Config) transport.WrapperFunc {
	for _, k := range healthCheckEnvironment {
		if _, set := os.LookupEnv(k); set {
			return nil
		}
	}
	return func(rt http.RoundTripper) http.RoundTripper {
		if t := httpTransport(rt); t != nil && t.HTTP2 == nil {
			t.HTTP2 = &h
		}
		return rt
	}
}

// httpTransport is the *http.Transport under rt (client-go's transport cache
// wraps it), or nil.
func httpTransport(rt http.RoundTripper) *http.Transport {
	for {
		switch r := rt.(type) {
		case *http.Transport:
			return r
		case utilnet.RoundTripperWrapper:
			rt = r.WrappedRoundTripper()
		default:
			return nil
		}
	}
}
