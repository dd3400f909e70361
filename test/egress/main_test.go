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

// Package egress runs a control plane whose kube-apiservers (v1.36.3 and
// v1.37.2, with the filter) have an egress selector: their controlplane
// network context goes through an HTTP CONNECT proxy the test runs, and
// requests proxied between them must go through it.
package egress

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/peerdiscovery/internal/localcluster"
	"sigs.k8s.io/peerdiscovery/internal/pki"
	"sigs.k8s.io/peerdiscovery/test/planetest"
)

// The servers, by index.
const (
	v136 = 0 // v1.36.3: no storagemigration.k8s.io/v1
	v137 = 1 // v1.37.2, policy/v1 turned off
)

// subnetOctet is this package's subnet, 10.254.97.0/24.
const subnetOctet = 97

// proxyPort is the CONNECT proxy's port on the host side of the plane's
// veth (10.254.97.1; the plane's load balancer has 6443 there). The
// kube-apiservers need its address before they start, the address exists
// only once the plane's network does, and the servers dial it only when
// they proxy a request: a fixed port on the plane's own address.
const proxyPort = 3128

var (
	cluster *localcluster.Cluster
	// egress is the proxy's PKI: its CA, which signs its serving
	// certificate and the kube-apiservers' client certificates.
	egressCA, egressServing *pki.KeyPair
)

func TestMain(m *testing.M) {
	planetest.Main(m, planetest.MainConfig{
		Skipped:      "end-to-end tests need real binaries and network namespaces: set PEERDISCOVERY_E2E=1 (hack/test.sh does)",
		StartTimeout: 20 * time.Minute,
		Plane: func(localcluster.Routing) (localcluster.Config, error) {
			flags, err := writeEgressConfigs(2)
			if err != nil {
				return localcluster.Config{}, fmt.Errorf("the egress selector configurations: %w", err)
			}
			return localcluster.Config{
				Servers: []localcluster.ServerSpec{
					{Version: "v1.36.3", ExtraFlags: []string{flags[v136]}},
					{Version: "v1.37.2", ExtraFlags: []string{flags[v137], "--runtime-config=policy/v1=false"}},
				},
				ExtensionReplicas: 1,
				ControllerManager: localcluster.ControllerManagerSpec{Disabled: true},
				SubnetOctet:       subnetOctet,
			}, nil
		},
	}, func(c *localcluster.Cluster) { cluster = c })
}

// proxyAddress is the CONNECT proxy's host:port.
func proxyAddress() string {
	return net.JoinHostPort(fmt.Sprintf("10.254.%d.1", subnetOctet), strconv.Itoa(proxyPort))
}

// egressClientName is the common name of kube-apiserver i's client
// certificate to the proxy, by which the proxy tells the servers apart.
func egressClientName(i int) string { return fmt.Sprintf("kube-apiserver-%d", i) }

// writeEgressConfigs makes the proxy's PKI and, for each of n
// kube-apiservers, an EgressSelectorConfiguration whose controlplane
// network context is HTTPConnect over TCP to the proxy. kube-apiserver
// validates HTTPConnect over an https:// URL with a clientCert and
// clientKey (its dialer loads them for any TCP transport, so it always
// speaks TLS to the proxy), so each server gets a client certificate of
// its own. EgressSelectorConfiguration is apiserver.k8s.io/v1beta1 (no v1
// in v1.36 or v1.37). The files go under the output folder (egress/),
// rewritten by every run; it returns each server's
// --egress-selector-config-file flag.
func writeEgressConfigs(n int) ([]string, error) {
	out := os.Getenv("PEERDISCOVERY_OUTPUT_DIR")
	if out == "" {
		out = filepath.Join("..", "..", "_output")
	}
	dir, err := filepath.Abs(filepath.Join(out, "egress"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if egressCA, err = pki.NewCA("egress-proxy-ca"); err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(proxyAddress())
	if egressServing, err = egressCA.NewServingCert("egress-proxy", nil, []net.IP{net.ParseIP(host)}); err != nil {
		return nil, err
	}
	caFile, _, err := egressCA.Write(dir, "egress-proxy-ca", false)
	if err != nil {
		return nil, err
	}
	var flags []string
	for i := range n {
		client, err := egressCA.NewClientCert(egressClientName(i), nil)
		if err != nil {
			return nil, err
		}
		certFile, keyFile, err := client.Write(dir, egressClientName(i), true)
		if err != nil {
			return nil, err
		}
		config := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: controlplane
  connection:
    proxyProtocol: HTTPConnect
    transport:
      tcp:
        url: https://%s
        tlsConfig:
          caBundle: %s
          clientCert: %s
          clientKey: %s
`, proxyAddress(), caFile, certFile, keyFile)
		file := filepath.Join(dir, egressClientName(i)+"-egress-selector.yaml")
		if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
			return nil, err
		}
		flags = append(flags, "--egress-selector-config-file="+file)
	}
	return flags, nil
}
