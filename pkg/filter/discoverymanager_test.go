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
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

// TestWrapDiscoveryManager: an enabled filter wraps the server's discovery
// manager, whose changes then start a read of the local discovery, and its
// periodic read becomes the slow safety poll; a disabled one leaves the
// manager as it is.
func TestWrapDiscoveryManager(t *testing.T) {
	disabled, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	rm := aggregated.NewResourceManager("apis")
	if got := disabled.WrapDiscoveryManager(rm); got != rm {
		t.Errorf("a disabled filter wrapped the discovery manager")
	}

	pki := newTestPKI(t)
	opts := Options{
		PeerCAFile: pki.peerCAFile, ProxyClientCertFile: pki.clientCertFile, ProxyClientKeyFile: pki.clientKey,
		PeerAdvertiseIP: "127.0.0.1", PeerAdvertisePort: "6443",
	}
	f, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.localRefreshInterval(); got != polledLocalRefreshInterval {
		t.Errorf("local refresh %v before the manager is wrapped, want %v", got, polledLocalRefreshInterval)
	}
	wrapped := f.WrapDiscoveryManager(rm)
	if wrapped == rm {
		t.Fatal("an enabled filter left the discovery manager unwrapped")
	}
	if got := f.localRefreshInterval(); got != followedLocalRefreshInterval {
		t.Errorf("local refresh %v with the manager wrapped, want %v", got, followedLocalRefreshInterval)
	}
	select {
	case <-f.views.Local.ChangedForTest():
		t.Fatal("a read was asked for before any change")
	default:
	}
	wrapped.WithSource(aggregated.CRDSource).AddGroupVersion("stable.example.com", apidiscoveryv2.APIVersionDiscovery{Version: "v1"})
	select {
	case <-f.views.Local.ChangedForTest():
	default:
		t.Fatal("a new group-version did not ask for a read of the local discovery")
	}

	opts.LocalRefreshInterval = 30 * time.Second
	set, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	set.WrapDiscoveryManager(aggregated.NewResourceManager("apis"))
	if got := set.localRefreshInterval(); got != opts.LocalRefreshInterval {
		t.Errorf("local refresh %v, want the option's %v", got, opts.LocalRefreshInterval)
	}
}
