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

package discovery

import (
	"fmt"
	"testing"
	"time"
)

// Peers get a new ID on every restart: the OpenAPI root cache must not keep
// the roots of IDs that are gone.
func TestPeerOpenAPIRootsAreBoundedByTime(t *testing.T) {
	var c peerOpenAPIRoots
	start := time.Now()
	for i := 0; i < 100; i++ {
		c.put(fmt.Sprintf("restarted-%d", i), cachedRoot{at: start.Add(time.Duration(i) * time.Second)})
	}
	if n := len(c.roots); n > int(peerRootTTL/time.Second)+1 {
		t.Fatalf("%d roots kept for 100 IDs seen over 100 s; want only those within %v", n, peerRootTTL)
	}
}
