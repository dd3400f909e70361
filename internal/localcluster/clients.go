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

package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/peerdiscovery/internal/pki"

	"k8s.io/client-go/rest"
)

// AdminConfig is a client-go config for kube-apiserver i as a
// system:masters user (client certificate), verifying the server against
// the cluster CA. It panics if i is out of range.
func (c *Cluster) AdminConfig(i int) *rest.Config {
	return c.clientConfig(i, c.pki.admin)
}

// ExtensionConfig is a client-go config for peerdiscovery-apiserver
// replica i at its own address (not through the aggregator), as a
// system:masters user, verifying the replica against the APIService's CA.
// It panics if i is out of range.
func (c *Cluster) ExtensionConfig(i int) *rest.Config {
	e, err := c.ext(i)
	if err != nil {
		panic(err)
	}
	return c.extensionConfig(e)
}

func (c *Cluster) extensionConfig(e *extReplica) *rest.Config {
	return restConfig(c.extEndpoint(e), c.pki.extCA.CertPEM, extServiceDNS, c.pki.admin)
}

// UserConfig is a client-go config for kube-apiserver i authenticated as
// user with groups (a fresh client certificate from the cluster CA; the
// groups system:authenticated is added by the server). It panics if i is
// out of range.
func (c *Cluster) UserConfig(i int, user string, groups []string) *rest.Config {
	kp, err := c.pki.ca.NewClientCert(user, groups)
	if err != nil {
		panic(fmt.Sprintf("minting a client certificate for %q: %v", user, err))
	}
	return c.clientConfig(i, kp)
}

func (c *Cluster) clientConfig(i int, kp *pki.KeyPair) *rest.Config {
	s, err := c.server(i)
	if err != nil {
		panic(err)
	}
	return restConfig(c.endpoint(s), c.pki.ca.CertPEM, "", kp)
}

// restConfig is a client-go config for host that verifies the server
// against ca (as serverName, unless "") and authenticates with kp.
func restConfig(host string, ca []byte, serverName string, kp *pki.KeyPair) *rest.Config {
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     bytes.Clone(ca),
			ServerName: serverName,
			CertData:   bytes.Clone(kp.CertPEM),
			KeyData:    bytes.Clone(kp.KeyPEM),
		},
		QPS:   100,
		Burst: 200,
	}
}

// Kubectl runs kubectl v1.37.2 with the cluster's kubeconfig and returns
// its standard output; the error carries standard error. Pass --context to
// pick a server (the current context is the newest).
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlContext(context.Background(), args...)
}

// KubectlContext is Kubectl with a context.
func (c *Cluster) KubectlContext(ctx context.Context, args ...string) (string, error) {
	// A discovery cache per run: a new cluster on the same addresses must
	// not be seen through the last one's cached discovery.
	cmd := exec.CommandContext(ctx, c.bins.kubectl, append([]string{"--kubeconfig=" + c.kubeconfig, "--cache-dir=" + c.KubectlCacheDir()}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// KubectlCacheDir is kubectl's discovery cache for this run; pass it as
// --cache-dir when running kubectl yourself.
func (c *Cluster) KubectlCacheDir() string { return filepath.Join(c.runDir, "kubectl-cache") }

// KubectlBinary is the path of kubectl v1.37.2.
func (c *Cluster) KubectlBinary() string { return c.bins.kubectl }
