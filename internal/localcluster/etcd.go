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
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

func (c *Cluster) startEtcd(ctx context.Context) error {
	dataDir := filepath.Join(c.runDir, "etcd-data")
	c.etcd = &process{
		name:    "etcd",
		logPath: c.logPath("etcd"),
		argv: c.nsArgv("", c.bins.etcd,
			"--name=default",
			"--data-dir="+dataDir,
			"--listen-client-urls="+etcdClientURL,
			"--advertise-client-urls="+etcdClientURL,
			"--listen-peer-urls="+etcdPeerURL,
			"--initial-advertise-peer-urls="+etcdPeerURL,
			"--initial-cluster=default="+etcdPeerURL,
			// A throwaway local cluster: durability is not worth the
			// latency on slow disks.
			"--unsafe-no-fsync",
			"--log-level=warn",
		),
	}
	c.cfg.Logf("starting etcd %s", EtcdVersion)
	if err := c.etcd.start(); err != nil {
		return err
	}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{DialContext: c.net.dialContext, DisableKeepAlives: true},
	}
	return c.waitFor(ctx, c.etcd, "etcd /health", func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, etcdClientURL+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`), string(body)
	})
}
