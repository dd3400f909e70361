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
	"fmt"
	"os"
	"path/filepath"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const adminUser = "local-admin"

// writeKubeconfig writes <run>/kubeconfig: one cluster and one context per
// kube-apiserver (context named after the version), the admin client
// certificate, the cluster CA embedded; the newest server is current.
func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.pki.admin.CertPEM,
		ClientKeyData:         c.pki.admin.KeyPEM,
	}
	for _, s := range c.servers {
		cfg.Clusters[s.context] = &clientcmdapi.Cluster{
			Server:                   c.endpoint(s),
			CertificateAuthorityData: c.pki.ca.CertPEM,
		}
		cfg.Contexts[s.context] = &clientcmdapi.Context{Cluster: s.context, AuthInfo: adminUser}
	}
	cfg.CurrentContext = c.servers[newestServer(c.servers)].context
	c.kubeconfig = filepath.Join(c.runDir, "kubeconfig")
	return clientcmd.WriteToFile(*cfg, c.kubeconfig)
}

// writeTokenKubeconfig writes a kubeconfig for a bearer token against
// server, verified with the cluster CA.
func (c *Cluster) writeTokenKubeconfig(path, server, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.pki.ca.CertPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// relKubeconfig is the kubeconfig relative to OutputDir/local-up, the
// target of the stable link.
func (c *Cluster) relKubeconfig() string {
	return filepath.Join(filepath.Base(c.runDir), "kubeconfig")
}

// linkKubeconfig points OutputDir/local-up/kubeconfig at this run's
// kubeconfig (atomically replacing an older link).
func (c *Cluster) linkKubeconfig(localUp string) error {
	link := filepath.Join(localUp, "kubeconfig")
	tmp := link + ".tmp-" + filepath.Base(c.runDir)
	_ = os.Remove(tmp)
	if err := os.Symlink(c.relKubeconfig(), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	c.kubectlLink = link
	return nil
}

// StableKubeconfig is OutputDir/local-up/kubeconfig, a link to this
// cluster's kubeconfig, with Config.LinkKubeconfig ("" otherwise).
func (c *Cluster) StableKubeconfig() string { return c.kubectlLink }

// assignContextNames names each server's kubeconfig context after its
// version, with -<index> for repeated versions.
func assignContextNames(servers []*kubeServer) {
	count := map[string]int{}
	for _, s := range servers {
		count[s.spec.Version]++
	}
	for _, s := range servers {
		s.context = s.spec.Version
		if count[s.spec.Version] > 1 {
			s.context = fmt.Sprintf("%s-%d", s.spec.Version, s.index)
		}
	}
}

// newestServer is the index of the server with the highest version (the
// last one among equals): the kubeconfig's current context.
func newestServer(servers []*kubeServer) int {
	best := 0
	for i, s := range servers {
		vi := utilversion.MustParseSemantic(s.spec.Version)
		vb := utilversion.MustParseSemantic(servers[best].spec.Version)
		if vi.AtLeast(vb) {
			best = i
		}
	}
	return best
}
