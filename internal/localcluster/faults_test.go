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
	"strings"
	"testing"
)

// A partition marks both directions' connections by the sockets' group
// and drops every packet of a marked connection; -D removes exactly what
// -A added.
func TestPartitionRules(t *testing.T) {
	add := partitionRules(2000007710, 2000007712, "10.254.77.10", "10.254.77.12", 0x5d01, "-A")
	del := partitionRules(2000007710, 2000007712, "10.254.77.10", "10.254.77.12", 0x5d01, "-D")
	want := []string{
		"-A OUTPUT -p tcp -m owner --gid-owner 2000007710 -d 10.254.77.12 --dport 6443 -j CONNMARK --set-mark 0x5d01",
		"-A OUTPUT -p tcp -m owner --gid-owner 2000007712 -d 10.254.77.10 --dport 6443 -j CONNMARK --set-mark 0x5d01",
		"-A OUTPUT -m connmark --mark 0x5d01 -j DROP",
	}
	for i, r := range add {
		if got := strings.Join(r, " "); got != want[i] {
			t.Errorf("rule %d: %s, want %s", i, got, want[i])
		}
		if got := strings.Join(del[i], " "); got != "-D"+want[i][2:] {
			t.Errorf("delete %d: %s", i, got)
		}
	}
}

// Every kube-apiserver of every subnet has its own group.
func TestServerGIDs(t *testing.T) {
	seen := map[uint32]string{}
	for octet := 1; octet <= 254; octet++ {
		c := &Cluster{cfg: Config{SubnetOctet: octet}}
		for i := range maxKubeAPIServers {
			g := c.serverGID(i)
			who := fmt.Sprintf("octet %d server %d", octet, i)
			if other, dup := seen[g]; dup {
				t.Fatalf("%s and %s share group %d", who, other, g)
			}
			seen[g] = who
			if cred := c.serverCredential(i); cred.Uid != 0 || cred.Gid != g || len(cred.Groups) != 0 {
				t.Fatalf("%s: %+v", who, cred)
			}
		}
	}
}
