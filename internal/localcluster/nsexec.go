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
	"syscall"
	"time"
)

// nsArgv runs argv inside the cluster's network namespace; with hostname,
// also in a new UTS namespace with that hostname. The command execs all
// the way down, so the pid (and process group) is the component's.
func (c *Cluster) nsArgv(hostname string, argv ...string) []string {
	out := []string{"ip", "netns", "exec", c.net.Name}
	if hostname != "" {
		out = append(out, "unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, hostname)
	}
	return append(out, argv...)
}

// argvHostname is the hostname nsArgv set ("" for none).
func argvHostname(argv []string) string {
	for i, a := range argv {
		if a == `hostname "$0" && exec "$@"` && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

// RunInNetwork starts argv inside the cluster's network namespace, logging
// to logs/<name>.log. The returned function stops it (SIGTERM, then
// SIGKILL after 5s); Stop kills it too, with everything else left in the
// namespace.
func (c *Cluster) RunInNetwork(name string, argv ...string) (stop func() error, err error) {
	if c.stopped.Load() {
		return nil, fmt.Errorf("cluster is stopped")
	}
	p := &process{name: name, logPath: c.logPath(name), argv: c.nsArgv("", argv...)}
	if err := p.start(); err != nil {
		return nil, err
	}
	return func() error { return p.stop(syscall.SIGTERM, 5*time.Second) }, nil
}
